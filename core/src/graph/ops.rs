//! Ops: what each allocates in forward, and what its autograd node keeps
//! and takes in backward.

use super::{Graph, Node, SavedTensorHooks, Value, ValueState, SAVED_SLOTS};
use crate::component::Component;
use crate::graph::GradOrder;

/// What an op's autograd node keeps for backward (the choices
/// `derivatives.yaml` makes), and the workspace its backward takes. The
/// common cases read as a phrase at the call site:
///
/// - `Saves::NOTHING`: an addition, a copy, a scale by a constant;
/// - `Saves::inputs(&[x, w])`: a multiply or matmul keeps its operands;
/// - `Saves::output()`: softmax, log_softmax, tanh keep their result;
/// - `.and_buffer(bytes)`: a further saved buffer the kernel allocates
///   after its output (attention's logsumexp, a norm's mean and rstd,
///   pooling indices); `.and_buffer_before_output(bytes)` allocates it
///   first (dropout's bool mask);
/// - `.with_backward_workspace(bytes)`: a buffer backward takes and frees
///   before it allocates the input gradients.
///
/// In inference (no node recorded) the saved buffer is still allocated by
/// the kernel and freed when the op returns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Saves<'a> {
    inputs: &'a [Value],
    output: bool,
    buffer: u64,
    buffer_before_output: bool,
    backward_workspace: u64,
}

impl<'a> Saves<'a> {
    /// Keeps nothing for backward.
    pub const NOTHING: Saves<'static> = Saves {
        inputs: &[],
        output: false,
        buffer: 0,
        buffer_before_output: false,
        backward_workspace: 0,
    };

    /// Keeps these values (inputs or earlier values, at most
    /// [`SAVED_SLOTS`] with the output).
    pub const fn inputs(values: &'a [Value]) -> Saves<'a> {
        Saves {
            inputs: values,
            ..Saves::NOTHING
        }
    }

    /// Keeps the op's own output.
    pub const fn output() -> Saves<'a> {
        Saves::NOTHING.and_output()
    }

    /// Keeps the op's own output too.
    pub const fn and_output(self) -> Saves<'a> {
        Saves {
            output: true,
            ..self
        }
    }

    /// Keeps a further buffer of `bytes`, allocated right after the output.
    pub const fn and_buffer(self, bytes: u64) -> Saves<'a> {
        Saves {
            buffer: bytes,
            ..self
        }
    }

    /// Keeps a further buffer of `bytes`, allocated before the output.
    pub const fn and_buffer_before_output(self, bytes: u64) -> Saves<'a> {
        Saves {
            buffer: bytes,
            buffer_before_output: true,
            ..self
        }
    }

    /// Backward takes a workspace of `bytes`, and frees it, before it
    /// allocates the input gradients (the memory-efficient attention
    /// kernel's accumulator).
    pub const fn with_backward_workspace(self, bytes: u64) -> Saves<'a> {
        Saves {
            backward_workspace: bytes,
            ..self
        }
    }
}

impl Graph<'_> {
    /// An op: allocates its output (`out_bytes`, tagged `component`) and,
    /// in grad mode when an input needs a gradient, records an autograd
    /// node that keeps what `saves` names for backward. `inputs` are the
    /// values the gradient flows to; each saved value must be an input or
    /// an earlier value.
    pub fn op(
        &mut self,
        name: &'static str,
        inputs: &[Value],
        out_bytes: u64,
        component: Component,
        saves: Saves,
    ) -> Value {
        self.replay.op(name, self.layer);
        let requires_grad = self.grad_mode && inputs.iter().any(|&i| self.requires_grad(i));
        let saving =
            requires_grad && (!saves.inputs.is_empty() || saves.output || saves.buffer > 0);
        let packs_after_kernel = saves.output || saves.buffer > 0;
        let (runs, records) = self.hooks_see_op(saving, packs_after_kernel);
        let early_buffer = (runs && saves.buffer_before_output && saves.buffer > 0)
            .then(|| self.replay.alloc(saves.buffer, Component::Activations));
        let storage = runs.then(|| self.replay.alloc(out_bytes, component));
        let out = self.push(ValueState {
            bytes: out_bytes,
            component,
            storage,
            refs: 1,
            requires_grad,
            leaf_param: false,
            grad: None,
            grad_is_view: false,
            base: None,
        });
        let extra = if early_buffer.is_some() {
            early_buffer
        } else if runs && saves.buffer > 0 {
            Some(self.replay.alloc(saves.buffer, Component::Activations))
        } else {
            None
        };
        if let SavedTensorHooks::Recompute { saving_ops_left: 0 } = self.hooks {
            // The last saved tensor was packed after the kernel: the
            // recompute stops here, once the op's outputs exist.
            self.hooks = SavedTensorHooks::Stopped;
        }
        if requires_grad && records {
            let mut node = Node {
                extra,
                backward_workspace: saves.backward_workspace,
                recomputed: self.recomputing,
                ..Node::new(name, self.layer, out)
            };
            for (slot, &i) in node.inputs.iter_mut().zip(inputs) {
                *slot = Some(i);
            }
            for (slot, &s) in node.saved.iter_mut().zip(saves.inputs) {
                *slot = Some(s);
                self.retain(s);
                self.mark_saved(s);
            }
            debug_assert!(
                saves.inputs.len() + usize::from(saves.output) <= SAVED_SLOTS,
                "{name}: more saved values than a node holds"
            );
            if saves.output {
                let slot = saves.inputs.len().min(SAVED_SLOTS - 1);
                node.saved[slot] = Some(out);
                self.retain(out);
                self.mark_saved(out);
            }
            self.nodes.push(node);
        } else if let Some(t) = extra {
            self.replay.free(t);
        }
        out
    }

    /// What checkpointing's hooks make of an op about to run that saves
    /// tensors (`saving`), packing some after its kernel or only inputs
    /// before: whether its kernel runs (allocates) and whether its node is
    /// recorded. A segment's forward counts it and records nothing; a
    /// recompute counts it down, and stops before the kernel when the last
    /// saved tensor is an input (after it otherwise, see [`Graph::op`]).
    fn hooks_see_op(&mut self, saving: bool, packs_after_kernel: bool) -> (bool, bool) {
        match &mut self.hooks {
            SavedTensorHooks::Off => (true, true),
            SavedTensorHooks::Placeholders { saving_ops } => {
                *saving_ops += u32::from(saving);
                (true, false)
            }
            SavedTensorHooks::Recompute { saving_ops_left } if saving => {
                *saving_ops_left -= 1;
                if *saving_ops_left == 0 && !packs_after_kernel {
                    self.hooks = SavedTensorHooks::Stopped;
                    return (false, true);
                }
                (true, true)
            }
            SavedTensorHooks::Recompute { .. } => (true, true),
            SavedTensorHooks::Stopped => {
                debug_assert!(!saving, "an op saved after the recompute stopped");
                (false, true)
            }
            SavedTensorHooks::Rehearsal => (false, true),
        }
    }

    /// No kernel runs: the recompute stopped, or is rehearsed.
    fn kernels_skipped(&self) -> bool {
        matches!(
            self.hooks,
            SavedTensorHooks::Stopped | SavedTensorHooks::Rehearsal
        )
    }

    /// An in-place op on `target` (e.g. `relu_`): no allocation; in grad
    /// mode records a node whose gradient flows to `target`'s producer.
    /// `saves_output` keeps `target` alive for backward.
    pub fn inplace(&mut self, name: &'static str, target: Value, saves_output: bool) {
        let saving = self.grad_mode && self.requires_grad(target) && saves_output;
        let (_, records) = self.hooks_see_op(saving, true);
        if let SavedTensorHooks::Recompute { saving_ops_left: 0 } = self.hooks {
            self.hooks = SavedTensorHooks::Stopped;
        }
        if saving && records {
            self.retain(target);
            self.mark_saved(target);
            // Freed with the producer's node: attach as an extra hold.
            self.nodes.push(Node {
                saved: [Some(target), None, None, None, None],
                in_place: true,
                recomputed: self.recomputing,
                ..Node::new(name, self.layer, target)
            });
        }
    }

    /// `target += other` in place: no allocation; in grad mode records a
    /// node that hands `target`'s gradient, as is, to `other` too (it stays
    /// `target`'s for its producer), as `AddBackward` does.
    pub fn inplace_add(&mut self, name: &'static str, target: Value, other: Value) {
        if !self.grad_mode || !(self.requires_grad(target) || self.requires_grad(other)) {
            return;
        }
        self.st_mut(target).requires_grad = true;
        if let SavedTensorHooks::Placeholders { .. } = self.hooks {
            return;
        }
        self.nodes.push(Node {
            inputs: [Some(other), None, None],
            addition: true,
            in_place: true,
            ..Node::new(name, self.layer, target)
        });
    }

    /// Gives the node that produced `output` (the most recent one)
    /// backward scratch buffers, taken one after the other after its gradients are allocated and
    /// freed before its incoming gradient. No-op when no node was recorded.
    pub fn set_backward_scratch(&mut self, output: Value, buffers: [u64; 2]) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.backward_scratch = buffers;
            }
        }
    }

    /// Gives the node that produced `output` (the most recent one) the
    /// fp32 memory-efficient attention backward's row sums, `bytes` each:
    /// `(grad_out * out).sum(-1)` and its transposed contiguous copy are
    /// taken while the first scratch buffer (the product) is live; the sum
    /// goes, then the product, and the copy stays through the second (the
    /// kernel's workspace). No-op when no node was recorded.
    pub fn set_backward_row_sums(&mut self, output: Value, bytes: u64) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.backward_row_sums = bytes;
            }
        }
    }

    /// Gives the node that produced `output` (the most recent one) a
    /// backward formula with `count` (at most 4) temporaries the size of its first
    /// input, alive together with the gradient it computes. `erf`'s
    /// formula, `2.0 / sqrt(M_PI) * exp(-(self.pow(2))) * grad`, makes four
    /// (`pow`, the negation, `exp`, the scaling) before the product: the
    /// H200 trace of ESM-2 650M fp32 training (its Python GELU) allocates
    /// five 80 MiB blocks at each layer's `erf` backward, then frees the
    /// four temporaries newest first, the incoming gradient and the saved
    /// input (`measurements/h200-generalization/trace-segments-26.jsonl.gz`).
    /// No-op when no node was recorded.
    pub fn set_backward_temporaries(&mut self, output: Value, count: u8) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.backward_temporaries = count;
            }
        }
    }

    /// Gives the node that produced `output` (the most recent one) buffers
    /// its backward computes a gradient through once its other gradients
    /// exist, nested: each taken while the ones before it are held, then
    /// freed newest first. A broadcast product's gradient for its small
    /// operand (RMSNorm's `weight * x`): the full-size product `grad * x`,
    /// then the reduction's staging buffer ([`crate::families::nn`]'s
    /// `column_sum_buffer`) to sum it to the weight's shape. The H200
    /// trace of Llama-3.2-1B training as a reward model, amp bf16 b8
    /// L2048 (`measurements/h200-generalization/trace-segments-27.jsonl.gz`,
    /// events 989 to 995): the input's 128 MiB gradient, a 128 MiB product,
    /// a 132 MiB buffer, both freed, then the incoming gradient. No-op when
    /// no node was recorded.
    pub fn set_backward_nested(&mut self, output: Value, buffers: [u64; 2]) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.backward_nested = buffers;
            }
        }
    }

    /// Gives the node that produced `output` (the most recent one) one
    /// backward kernel per input, each with its workspace: the kernel for
    /// input `i` writes that input's gradient, then takes `workspaces[i]`
    /// (cuDNN's data-gradient, then weight-gradient convolution; the H200
    /// trace of ResNet-18 amp training: input gradient, its kernel's
    /// 16.75 MiB, weight gradient, its kernel's 19.75 MiB). A kernel whose
    /// input needs no gradient does not run. No-op when no node was recorded.
    pub fn set_backward_kernels(&mut self, output: Value, workspaces: [u64; 2]) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.backward_scratch = workspaces;
                node.scratch_per_input = true;
            }
        }
    }

    /// Marks the node that produced `output` (the most recent one) as a
    /// matrix multiply: its backward computes its gradients in `order`, and
    /// the first backward matrix multiply of a fresh process creates the
    /// autograd thread's cuBLAS workspace, right after its output exists
    /// (the traces: ResNet-50's `fc` input gradient, BERT's MLM decoder,
    /// GPT-2's `lm_head` weight gradient). No-op when no node was recorded.
    pub fn mark_gemm(&mut self, output: Value, order: GradOrder) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.gemm = Some(order);
            }
        }
    }

    /// Marks the node that produced `output` (the most recent one) as an
    /// addition: `AddBackward` returns its gradient as is for each operand
    /// of the same size (no allocation; both input buffers hold the one
    /// tensor), and a cast or reduced copy for the others (a bf16 operand
    /// of an fp32 sum, a broadcast bias). No-op when no node was recorded.
    pub fn mark_addition(&mut self, output: Value) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.addition = true;
            }
        }
    }

    /// Marks the node that produced `output` (the most recent one) as a
    /// product `self * other`: `MulBackward0` computes `other`'s gradient
    /// before `self`'s (PyTorch's generated autograd functions take the
    /// arguments in alphabetical order, as [`GradOrder`] says for matrix
    /// multiplies). The H200 trace of a checkpointed Llama-3.2-1B reward
    /// model (`measurements/h200-generalization/trace-segments-27b.jsonl.gz`,
    /// events 1,464 to 1,470): the MLP's `act(gate) * up` allocates two
    /// 256 MiB gradients and `up_proj`'s backward frees the first. No-op
    /// when no node was recorded.
    ///
    /// `wide_grads` are the bytes of each operand's gradient as the
    /// backward computes it when the operand's dtype is narrower than the
    /// product's (zero otherwise): the incoming gradient times the other
    /// operand, in the product's dtype, which the engine's
    /// `validate_outputs` casts to the operand's and lets go of. The H200
    /// trace of checkpointed Llama-3.2-1B amp training
    /// (`measurements/h200-parallel/traces/
    /// llama1b_zero1_w1_amp_bf16_b4_L1024_ckpt1.trace.json.gz`, events
    /// 2,911 to 2,914): rotary's bf16 key times fp32 `sin` allocates an
    /// 8 MiB fp32 gradient, then its 4 MiB bf16 cast, then frees the first.
    pub fn mark_product(&mut self, output: Value, wide_grads: [u64; 2]) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.other_grad_first = true;
                node.wide_grads = wide_grads;
            }
        }
    }

    /// Marks the node that produced `output` (the most recent one) as a
    /// matmul by a weight its backward dequantizes first (bitsandbytes'
    /// `MatMul4Bit` and `MatMul8bitLt`): the `bytes` of the dequantized
    /// weight are allocated before the input's gradient and freed after
    /// it. No-op when no node was recorded.
    pub fn mark_dequantized_weight(&mut self, output: Value, bytes: u64) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.wide_grads = [bytes, 0];
            }
        }
    }

    /// Marks the node that produced `output` (the most recent one) as one
    /// whose backward hands each input a view of the incoming gradient,
    /// so nothing is allocated and the incoming gradient lives until the
    /// last view is consumed: a concatenation (`CatBackward`'s slices), or
    /// a copy whose backward reshapes the gradient where that is a view.
    /// No-op when no node was recorded.
    pub fn mark_view_grads(&mut self, output: Value) {
        if let Some(node) = self.nodes.last_mut() {
            if node.output == output {
                node.grads_are_views = true;
            }
        }
    }

    /// A slice of `base` (`x[..., :half]`), `bytes` long: a view, nothing
    /// allocated; it holds `base` until it goes. In grad mode its node's
    /// backward (`SliceBackward`) allocates a zeroed gradient the size of
    /// `base` and copies the slice's gradient in (a view of all of `base`
    /// whose gradient arrives in another layout copies it alike).
    pub fn slice(&mut self, name: &'static str, base: Value, bytes: u64) -> Value {
        self.replay.op(name, self.layer);
        let requires_grad = self.grad_mode && self.requires_grad(base);
        let (_, records) = self.hooks_see_op(false, false);
        let component = self.st(base).component;
        self.retain(base);
        let out = self.push(ValueState {
            bytes,
            component,
            storage: None,
            refs: 1,
            requires_grad,
            leaf_param: false,
            grad: None,
            grad_is_view: false,
            base: Some(base),
        });
        if requires_grad && records {
            self.nodes.push(Node {
                inputs: [Some(base), None, None],
                recomputed: self.recomputing,
                ..Node::new(name, self.layer, out)
            });
        }
        out
    }

    /// `base.unbind(0)` into `N` views of `bytes` each. Their backward
    /// (`UnbindBackward`, a `torch.stack`) makes one gradient the size of
    /// `base` when the first view's gradient arrives, and each view's
    /// incoming gradient is freed as its node runs (the H200 trace of
    /// timm's ViT-S/16 fp32 training: a 110.81 MiB stack, then the three
    /// 36.94 MiB gradients of q, k and v freed).
    pub fn unbind<const N: usize>(
        &mut self,
        name: &'static str,
        base: Value,
        bytes: u64,
    ) -> [Value; N] {
        [(); N].map(|_| {
            let view = self.slice(name, base, bytes);
            if let Some(node) = self.nodes.last_mut() {
                if node.output == view {
                    node.stacked = true;
                }
            }
            view
        })
    }

    /// Transient buffers live together inside one kernel (zero sizes skipped).
    pub fn scratch(&mut self, buffers: [u64; 2]) {
        if self.kernels_skipped() {
            return;
        }
        let [a, b] = buffers
            .map(|bytes| (bytes > 0).then(|| self.replay.alloc(bytes, Component::Transient)));
        for t in [a, b].into_iter().flatten() {
            self.replay.free(t);
        }
    }

    /// A transient workspace: allocated and freed inside one kernel.
    pub fn workspace(&mut self, name: &'static str, bytes: u64) {
        self.replay.op(name, self.layer);
        if self.kernels_skipped() {
            return;
        }
        self.replay.touch(bytes, Component::Transient);
    }
}
