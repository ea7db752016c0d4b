//! A tensor program with PyTorch's lifetime rules, for the families to write
//! their forward passes in.
//!
//! - A value's storage lives while anything holds it: the program (until it
//!   [`Graph::drop`]s it, as Python drops a rebound name), an autograd node
//!   that saved it for backward, or autocast's weight-cast cache.
//! - In grad mode each op records a node with the inputs it saves (the same
//!   choices `derivatives.yaml` makes: `mul` saves the other operand,
//!   `linear` saves its input only when the weight needs a gradient, ...).
//! - [`Graph::backward`] then runs the autograd engine: nodes in reverse
//!   order; each allocates gradients for its inputs that need one,
//!   accumulates into an existing gradient in place, frees its gradient
//!   output and releases what it saved. Leaf parameters keep their gradient
//!   as `.grad` until [`Graph::zero_grad`].

use crate::component::Component;
use crate::trace::{Replay, Tensor};
use alloc::vec::Vec;

mod units;
pub use units::UnitEvent;

/// Index of a value in a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value {
    index: u32,
    /// Debug builds: which occupant of a reused slot this handle names
    /// (see [`Graph::release`]), so that a use after drop is caught.
    #[cfg(debug_assertions)]
    generation: u32,
}

#[derive(Clone, Debug)]
struct ValueState {
    bytes: u64,
    component: Component,
    storage: Option<Tensor>,
    /// Holders: the program (1 until dropped), saving nodes, caches.
    refs: u32,
    requires_grad: bool,
    leaf_param: bool,
    grad: Option<Tensor>,
    /// The gradient is a matrix multiply's weight gradient: the H200 traces
    /// show `InputBuffer` never adding into one in place (probably because
    /// autograd hands it over as a transposed view, `mm(...).t()`).
    grad_from_matmul: bool,
}

#[derive(Clone, Debug)]
struct Node {
    name: &'static str,
    layer: Option<u32>,
    inputs: [Option<Value>; 3],
    saved: [Option<Value>; 4],
    /// Extra buffers saved by the op (dropout masks, logsumexp), freed with the node.
    extra: Option<Tensor>,
    output: Value,
    /// Transient bytes the backward kernel needs beyond its gradients,
    /// taken before the gradients are allocated (flash attention's
    /// accumulator).
    backward_workspace: u64,
    /// Transient buffers taken one after the other once the gradients are
    /// allocated (cuDNN convolution workspaces of the data-gradient and the
    /// weight-gradient kernels: each kernel's output exists first).
    backward_scratch: [u64; 2],
    /// A checkpointed segment: backward stops here and hands control back.
    checkpoint: Option<u32>,
    /// A matrix multiply (see [`Graph::mark_gemm`]).
    gemm: Option<GradOrder>,
    /// An addition (see [`Graph::mark_addition`]).
    addition: bool,
    /// An in-place op on `output` ([`Graph::inplace`], [`Graph::inplace_add`]).
    in_place: bool,
    /// `backward_scratch` holds one kernel's workspace per input: each is
    /// taken right after that input's gradient (see
    /// [`Graph::set_backward_kernels`]).
    scratch_per_input: bool,
}

impl Node {
    /// A node named `name` producing `output`, with no inputs, saved
    /// tensors, buffers or marks yet.
    fn new(name: &'static str, layer: Option<u32>, output: Value) -> Node {
        Node {
            name,
            layer,
            inputs: [None; 3],
            saved: [None; 4],
            extra: None,
            output,
            backward_workspace: 0,
            backward_scratch: [0; 2],
            checkpoint: None,
            gemm: None,
            addition: false,
            in_place: false,
            scratch_per_input: false,
        }
    }
}

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

    /// Keeps these values (inputs or earlier values, at most four with the
    /// output).
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

/// The order in which a matrix multiply's backward computes its gradients.
/// PyTorch's generated autograd functions compute them in the alphabetical
/// order of the argument names: `addmm(self=bias, mat1=input, mat2=weight.t())`
/// gives input, weight, bias (the ViT and BERT traces); `mm(self=input,
/// mat2=weight.t())`, a linear without bias, gives weight, then input (GPT-2's
/// `lm_head` in `measurements/h200-generalization/trace-segments.jsonl`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradOrder {
    /// `addmm`: input, weight (then bias).
    InputFirst,
    /// `mm`: weight, then input.
    WeightFirst,
}

/// A checkpoint boundary reached by [`Graph::backward_run`]: the caller
/// recomputes the segment from `input` in grad mode, gives the recomputed
/// output `grad` with [`Graph::set_grad`], runs backward again, then
/// releases `held` with [`Graph::release_detached`].
#[derive(Debug)]
pub struct CheckpointHit {
    /// Segment index given to [`Graph::checkpoint`].
    pub segment: u32,
    /// The segment's input, kept alive by the checkpoint.
    pub input: Value,
    /// Gradient of the segment's output (None if nothing flowed).
    pub grad: Option<Tensor>,
    /// What the boundary held.
    pub held: Detached,
}

/// The value and node arrays a graph leaves with its replay when it is
/// done, for the next graph on the same replay to reuse (a curve replays
/// hundreds of lengths; fresh arrays would page-fault in each time).
#[derive(Clone, Debug, Default)]
pub(crate) struct GraphBuffers {
    values: Vec<ValueState>,
    nodes: Vec<Node>,
    reusable: Vec<u32>,
    #[cfg(debug_assertions)]
    generations: Vec<u32>,
}

/// A tensor program bound to a replay.
pub struct Graph<'r> {
    /// The replay every allocation goes to.
    pub replay: &'r mut Replay,
    values: Vec<ValueState>,
    nodes: Vec<Node>,
    /// Slots of dropped values that no node can name, for new values: a
    /// long generation (no autograd nodes) would otherwise grow `values`
    /// by every op of every decode step.
    reusable: Vec<u32>,
    /// Debug builds: occupants of each slot so far (see [`Value`]).
    #[cfg(debug_assertions)]
    generations: Vec<u32>,
    /// Record nodes for backward (`torch.is_grad_enabled()`).
    pub grad_mode: bool,
    /// A parameter's gradient is copied into a buffer of its own and freed
    /// as soon as it exists (DDP with `gradient_as_bucket_view`: `.grad`
    /// becomes a view of the bucket).
    pub leaf_grads_copied_out: bool,
    layer: Option<u32>,
    /// Bytes of every parameter created, when recording (see [`Graph::record_params`]).
    param_log: Option<Vec<u64>>,
    /// fp32 copies from a build-then-cast load, freed one per new parameter.
    staged: Vec<Tensor>,
    /// cuBLAS workspaces a fresh process creates lazily: the forward
    /// thread's at its first matmul ([`Graph::gemm`]), the autograd
    /// thread's at the first backward matmul ([`Graph::mark_gemm`]).
    pending_workspaces: [u64; 2],
    /// Gradients held by more than one input buffer (an addition hands its
    /// gradient to each operand as is): the tensor and its extra holders.
    shared_grads: Vec<(Tensor, u32)>,
    /// The GPU's multiprocessors and resident threads per multiprocessor:
    /// PyTorch's reduction kernels size their grid (and their global-memory
    /// buffer) by them.
    pub multiprocessors: (u32, u32),
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        self.replay.graph_buffers = GraphBuffers {
            values: core::mem::take(&mut self.values),
            nodes: core::mem::take(&mut self.nodes),
            reusable: core::mem::take(&mut self.reusable),
            #[cfg(debug_assertions)]
            generations: core::mem::take(&mut self.generations),
        };
    }
}

impl<'r> Graph<'r> {
    /// A program in no-grad mode.
    pub fn new(replay: &'r mut Replay) -> Graph<'r> {
        let GraphBuffers {
            mut values,
            mut nodes,
            mut reusable,
            #[cfg(debug_assertions)]
            mut generations,
        } = core::mem::take(&mut replay.graph_buffers);
        values.clear();
        nodes.clear();
        reusable.clear();
        #[cfg(debug_assertions)]
        generations.clear();
        values.reserve(4096);
        nodes.reserve(4096);
        Graph {
            replay,
            values,
            nodes,
            reusable,
            #[cfg(debug_assertions)]
            generations,
            grad_mode: false,
            leaf_grads_copied_out: false,
            layer: None,
            param_log: None,
            staged: Vec::new(),
            pending_workspaces: [0; 2],
            shared_grads: Vec::new(),
            multiprocessors: (
                crate::runtime::H200_MULTIPROCESSORS,
                crate::runtime::H200_THREADS_PER_MULTIPROCESSOR,
            ),
        }
    }

    /// A program in no-grad mode on the GPU `runtime` describes.
    pub fn for_runtime(replay: &'r mut Replay, runtime: &crate::RuntimeProfile) -> Graph<'r> {
        let mut g = Graph::new(replay);
        g.multiprocessors = (runtime.multiprocessors, runtime.threads_per_multiprocessor);
        g
    }

    /// Defers the cuBLAS workspaces of a fresh process: `forward` bytes at
    /// the first matmul, `autograd` bytes at the first backward matmul (0:
    /// none).
    pub fn defer_workspaces(&mut self, forward: u64, autograd: u64) {
        self.pending_workspaces = [forward, autograd];
    }

    /// A matmul runs: a fresh process's forward cuBLAS handle allocates its
    /// workspace now (kept for the life of the process).
    pub fn gemm(&mut self) {
        let bytes = core::mem::take(&mut self.pending_workspaces[0]);
        if bytes > 0 {
            let _kept = self.replay.alloc(bytes, Component::LibraryWorkspace);
        }
    }

    /// A backward matrix multiply ran: a fresh process's autograd thread
    /// creates its cuBLAS workspace now.
    fn autograd_gemm(&mut self) {
        let bytes = core::mem::take(&mut self.pending_workspaces[1]);
        if bytes > 0 {
            let _kept = self.replay.alloc(bytes, Component::LibraryWorkspace);
        }
    }

    /// Starts recording the bytes of each parameter created.
    pub fn record_params(&mut self) {
        self.param_log = Some(Vec::new());
    }

    /// The recorded parameter sizes.
    pub fn recorded_params(&mut self) -> Vec<u64> {
        self.param_log.take().unwrap_or_default()
    }

    /// Build-then-cast loading: the model was constructed in fp32 (these
    /// sizes, in construction order) and is now cast parameter by
    /// parameter: each next [`Graph::param`] allocates the cast copy and then
    /// frees the fp32 original, as `module.half()` / `.to(dtype)` does.
    pub fn stage_fp32_construction(&mut self, fp32_sizes: &[u64]) {
        self.replay.op("load: construct in fp32", None);
        let mut staged: Vec<Tensor> = fp32_sizes
            .iter()
            .map(|&b| self.replay.alloc(b, Component::Weights))
            .collect();
        staged.reverse();
        self.staged = staged;
    }

    /// Sets the op name and layer that the next allocations belong to.
    pub fn at(&mut self, name: &'static str, layer: Option<u32>) {
        self.layer = layer;
        self.replay.op(name, layer);
    }

    /// Bytes of a value.
    pub fn bytes(&self, v: Value) -> u64 {
        self.st(v).bytes
    }

    /// Whether a value needs a gradient.
    pub fn requires_grad(&self, v: Value) -> bool {
        self.st(v).requires_grad
    }

    fn push(&mut self, state: ValueState) -> Value {
        let index = match self.reusable.pop() {
            Some(i) => {
                self.values[i as usize] = state;
                i
            }
            None => {
                self.values.push(state);
                #[cfg(debug_assertions)]
                self.generations.push(0);
                (self.values.len() - 1) as u32
            }
        };
        Value {
            index,
            #[cfg(debug_assertions)]
            generation: self.generations[index as usize],
        }
    }

    /// The state of a live value (debug builds check that its slot was not
    /// handed to a newer value since it was dropped).
    fn st(&self, v: Value) -> &ValueState {
        #[cfg(debug_assertions)]
        assert_eq!(
            self.generations[v.index as usize], v.generation,
            "a value used after it was dropped"
        );
        &self.values[v.index as usize]
    }

    fn st_mut(&mut self, v: Value) -> &mut ValueState {
        #[cfg(debug_assertions)]
        assert_eq!(
            self.generations[v.index as usize], v.generation,
            "a value used after it was dropped"
        );
        &mut self.values[v.index as usize]
    }

    /// Allocates a parameter (or buffer) held for the whole run.
    pub fn param(&mut self, bytes: u64, requires_grad: bool) -> Value {
        let storage = self.replay.alloc(bytes, Component::Weights);
        if let Some(log) = self.param_log.as_mut() {
            log.push(bytes);
        }
        if let Some(original) = self.staged.pop() {
            self.replay.free(original);
        }
        self.push(ValueState {
            bytes,
            component: Component::Weights,
            storage: Some(storage),
            refs: 1,
            requires_grad,
            leaf_param: true,
            grad: None,
            grad_from_matmul: false,
        })
    }

    /// Allocates an input or a free-standing tensor (no node).
    pub fn input(&mut self, bytes: u64, component: Component) -> Value {
        let storage = self.replay.alloc(bytes, component);
        self.push(ValueState {
            bytes,
            component,
            storage: Some(storage),
            refs: 1,
            requires_grad: false,
            leaf_param: false,
            grad: None,
            grad_from_matmul: false,
        })
    }

    /// Marks a value as needing a gradient (`enable_input_require_grads`).
    pub fn set_requires_grad(&mut self, v: Value) {
        self.st_mut(v).requires_grad = true;
    }

    /// Changes the component a live value is counted under (no allocation).
    pub fn relabel(&mut self, v: Value, component: Component) {
        self.st_mut(v).component = component;
        if let Some(t) = self.values[v.index as usize].storage.as_mut() {
            self.replay.relabel(t, component);
        }
    }

    fn mark_saved(&mut self, v: Value) {
        let c = self.st(v).component;
        let saved = saved_component(c);
        if saved != c {
            self.relabel(v, saved);
        }
    }

    fn retain(&mut self, v: Value) {
        self.st_mut(v).refs += 1;
    }

    fn release(&mut self, v: Value) {
        let s = self.st_mut(v);
        debug_assert!(s.refs > 0, "release of a dead value");
        s.refs -= 1;
        if s.refs == 0 {
            if let Some(t) = s.storage.take() {
                self.replay.free(t);
            }
            // Without autograd nodes nothing can name the value again.
            if self.nodes.is_empty() {
                #[cfg(debug_assertions)]
                {
                    self.generations[v.index as usize] += 1;
                }
                self.reusable.push(v.index);
            }
        }
    }

    /// The program stops referencing `v` (a Python name rebound or going
    /// out of scope); storage is freed unless saved or cached.
    pub fn drop(&mut self, v: Value) {
        self.release(v);
    }

    /// Drops several values.
    pub fn drop_all(&mut self, vs: &[Value]) {
        for &v in vs {
            self.release(v);
        }
    }

    /// Holds `v` once more (a cache or a second Python name).
    pub fn hold(&mut self, v: Value) {
        self.retain(v);
    }

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
        let early_buffer = (saves.buffer_before_output && saves.buffer > 0)
            .then(|| self.replay.alloc(saves.buffer, Component::Activations));
        let storage = self.replay.alloc(out_bytes, component);
        let requires_grad = self.grad_mode && inputs.iter().any(|&i| self.requires_grad(i));
        let out = self.push(ValueState {
            bytes: out_bytes,
            component,
            storage: Some(storage),
            refs: 1,
            requires_grad,
            leaf_param: false,
            grad: None,
            grad_from_matmul: false,
        });
        let extra = if early_buffer.is_some() {
            early_buffer
        } else if saves.buffer > 0 {
            Some(self.replay.alloc(saves.buffer, Component::Activations))
        } else {
            None
        };
        if requires_grad {
            let mut node = Node {
                extra,
                backward_workspace: saves.backward_workspace,
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
            if saves.output {
                let slot = saves.inputs.len().min(3);
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

    /// An in-place op on `target` (e.g. `relu_`): no allocation; in grad
    /// mode records a node whose gradient flows to `target`'s producer.
    /// `saves_output` keeps `target` alive for backward.
    pub fn inplace(&mut self, name: &'static str, target: Value, saves_output: bool) {
        if self.grad_mode && self.requires_grad(target) && saves_output {
            self.retain(target);
            self.mark_saved(target);
            // Freed with the producer's node: attach as an extra hold.
            self.nodes.push(Node {
                saved: [Some(target), None, None, None],
                in_place: true,
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

    fn holders(&self, grad: Tensor) -> u32 {
        1 + self
            .shared_grads
            .iter()
            .find(|(t, _)| *t == grad)
            .map_or(0, |&(_, extra)| extra)
    }

    fn share_grad(&mut self, grad: Tensor) {
        match self.shared_grads.iter_mut().find(|(t, _)| *t == grad) {
            Some((_, extra)) => *extra += 1,
            None => self.shared_grads.push((grad, 1)),
        }
    }

    /// A holder lets go of a gradient; the last one frees it.
    fn drop_grad(&mut self, grad: Tensor) {
        match self.shared_grads.iter().position(|(t, _)| *t == grad) {
            Some(i) if self.shared_grads[i].1 > 1 => self.shared_grads[i].1 -= 1,
            Some(i) => {
                let _last_holder = self.shared_grads.swap_remove(i);
            }
            None => self.replay.free(grad),
        }
    }

    /// Transient buffers live together inside one kernel (zero sizes skipped).
    pub fn scratch(&mut self, buffers: [u64; 2]) {
        let [a, b] = buffers
            .map(|bytes| (bytes > 0).then(|| self.replay.alloc(bytes, Component::Transient)));
        for t in [a, b].into_iter().flatten() {
            self.replay.free(t);
        }
    }

    /// A transient workspace: allocated and freed inside one kernel.
    pub fn workspace(&mut self, name: &'static str, bytes: u64) {
        self.replay.op(name, self.layer);
        self.replay.touch(bytes, Component::Transient);
    }

    /// Nodes recorded so far (a mark for [`Graph::backward_run`]).
    pub fn mark(&self) -> usize {
        self.nodes.len()
    }

    /// Records a checkpoint boundary: `output` was computed from `input`
    /// without saving anything; backward will stop here (see [`CheckpointHit`]).
    pub fn checkpoint(&mut self, segment: u32, input: Value, output: Value) {
        if !self.grad_mode || !self.requires_grad(input) {
            return;
        }
        self.st_mut(output).requires_grad = true;
        self.retain(input);
        self.nodes.push(Node {
            inputs: [Some(input), None, None],
            saved: [Some(input), None, None, None],
            checkpoint: Some(segment),
            ..Node::new("checkpoint", self.layer, output)
        });
    }

    /// Runs backward from `loss` through every recorded node (no checkpoints).
    pub fn backward(&mut self, loss: Value) {
        self.seed(loss);
        while let Some(hit) = self.backward_run(0) {
            // Without a recompute callback a checkpoint passes gradients straight through.
            if let Some(g) = hit.grad {
                self.drop_grad(g);
            }
            self.release_detached(hit.held);
        }
    }

    /// Runs backward from `loss` with non-reentrant gradient checkpointing:
    /// at each checkpoint boundary (last segment first) `recompute(graph,
    /// segment, input)` runs the segment's forward again from its saved
    /// input, in grad mode, and returns its output; the boundary's gradient
    /// flows into that output, backward runs through the recomputed nodes,
    /// and what they and the boundary held is released before the next
    /// segment.
    pub fn backward_recomputing(
        &mut self,
        loss: Value,
        recompute: &mut dyn FnMut(&mut Graph, u32, Value) -> Value,
    ) {
        self.seed(loss);
        while let Some(hit) = self.backward_run(0) {
            let mark = self.mark();
            let out = recompute(self, hit.segment, hit.input);
            if let Some(grad) = hit.grad {
                self.set_grad(out, grad);
            }
            self.drop(out);
            while let Some(inner) = self.backward_run(mark) {
                if let Some(grad) = inner.grad {
                    self.drop_grad(grad);
                }
                self.release_detached(inner.held);
            }
            self.release_detached(hit.held);
        }
    }

    /// Seeds the gradient of `loss` with ones.
    pub fn seed(&mut self, loss: Value) {
        let seed_bytes = self.bytes(loss);
        let seed = self.replay.alloc(seed_bytes, Component::Transient);
        self.st_mut(loss).grad = Some(seed);
        self.gemm();
    }

    /// Runs recorded nodes in reverse down to `mark`; stops at a checkpoint
    /// boundary and returns it.
    pub fn backward_run(&mut self, mark: usize) -> Option<CheckpointHit> {
        while self.nodes.len() > mark {
            let node = self.nodes.pop().expect("non-empty");
            if let Some(segment) = node.checkpoint {
                let grad = self.st_mut(node.output).grad.take();
                let input = node.inputs[0].expect("checkpoint input");
                return Some(CheckpointHit {
                    segment,
                    input,
                    grad,
                    held: Detached {
                        output: node.output,
                        saved: node.saved,
                        extra: node.extra,
                    },
                });
            }
            self.backward_node(node);
        }
        None
    }

    fn backward_node(&mut self, node: Node) {
        self.replay.op(node.name, node.layer);
        if node.in_place {
            match node.inputs[0] {
                // `target += other`: both hold the one gradient.
                Some(other) => {
                    let grad = self.st(node.output).grad;
                    if let (Some(g), true) = (grad, self.st(other).requires_grad) {
                        self.share_grad(g);
                        if self.st(other).grad.is_some() {
                            self.accumulate(other, g);
                        } else {
                            self.st_mut(other).grad = Some(g);
                        }
                    }
                }
                // `relu_`: its backward (`threshold_backward`) writes a
                // fresh gradient for the producer, then the incoming
                // gradient and the saved output are released (the H200
                // trace of ResNet-18 amp training: a 6.12 MiB allocation,
                // then two 6.12 MiB frees, at each in-place ReLU).
                None => {
                    if let Some(incoming) = self.st_mut(node.output).grad.take() {
                        let bytes = self.st(node.output).bytes;
                        let fresh = self.replay.alloc(bytes, Component::Transient);
                        self.drop_grad(incoming);
                        self.st_mut(node.output).grad = Some(fresh);
                    }
                }
            }
            for s in node.saved.iter().flatten() {
                self.release(*s);
            }
            return;
        }
        let grad_out = self.st_mut(node.output).grad.take();
        // Gradients for inputs that already hold one: the engine adds them
        // once the node has run (`InputBuffer::accumulate`), after the
        // node's own gradient output and saved tensors are released.
        let mut accumulated: [Option<(Value, Tensor)>; 3] = [None; 3];
        let out_bytes = self.st(node.output).bytes;
        if grad_out.is_some() {
            if node.backward_workspace > 0 {
                self.replay
                    .touch(node.backward_workspace, Component::Transient);
            }
            let order = match node.gemm {
                Some(GradOrder::WeightFirst) => [1, 0, 2],
                _ => [0, 1, 2],
            };
            for (slot, &i) in order.iter().enumerate() {
                let Some(input) = node.inputs[i] else {
                    continue;
                };
                let s = self.st(input);
                if !s.requires_grad {
                    continue;
                }
                let (leaf, bytes) = (s.leaf_param, s.bytes);
                let component = if leaf {
                    Component::Gradients
                } else {
                    Component::Transient
                };
                let passed = match grad_out {
                    Some(out) if node.addition && !leaf && bytes == out_bytes => {
                        self.share_grad(out);
                        Some(out)
                    }
                    _ => None,
                };
                let g = match passed {
                    Some(out) => out,
                    None => self.replay.alloc(bytes, component),
                };
                if node.gemm.is_some() {
                    self.autograd_gemm();
                }
                let copied_out = leaf && self.leaf_grads_copied_out;
                let s = self.st_mut(input);
                if copied_out {
                    self.drop_grad(g);
                } else if s.grad.is_some() {
                    accumulated[slot] = Some((input, g));
                } else {
                    s.grad = Some(g);
                    s.grad_from_matmul = leaf && node.gemm.is_some();
                }
                match node.backward_scratch.get(i) {
                    Some(&bytes) if node.scratch_per_input && bytes > 0 => {
                        self.replay.touch(bytes, Component::Transient);
                    }
                    _ => {}
                }
            }
        }
        if grad_out.is_some() && !node.scratch_per_input {
            for bytes in node.backward_scratch {
                if bytes > 0 {
                    self.replay.touch(bytes, Component::Transient);
                }
            }
        }
        if let Some(g) = grad_out {
            self.drop_grad(g);
        }
        if let Some(t) = node.extra {
            self.replay.free(t);
        }
        for s in node.saved.iter().flatten() {
            self.release(*s);
        }
        for (input, new) in accumulated.into_iter().flatten() {
            self.accumulate(input, new);
        }
    }

    /// `InputBuffer::accumulate`: adds `new` into the gradient `input`
    /// holds, in place when that gradient has no other holder and is not a
    /// matrix multiply's weight gradient, else into a fresh sum (`old_var +
    /// var`). A tied embedding's two gradients (the head's, then the
    /// lookup's) are summed into a fresh tensor when the head multiplied by
    /// the parameter itself (the H200 traces of BERT fp32, GPT-2 bf16 and
    /// Llama-3.2-1B fp32 training: a vocabulary-sized sum, then both
    /// operands freed), in place when it multiplied by autocast's cast of
    /// it (GPT-2 amp: the cast's backward made a fresh fp32 gradient).
    fn accumulate(&mut self, input: Value, new: Tensor) {
        let old = self
            .st(input)
            .grad
            .expect("accumulating into a held gradient");
        let state = self.st(input);
        if self.holders(old) == 1 && !state.grad_from_matmul {
            self.drop_grad(new);
        } else {
            let state = self.st(input);
            let component = if state.leaf_param {
                Component::Gradients
            } else {
                Component::Transient
            };
            let sum = self.replay.alloc(state.bytes, component);
            self.st_mut(input).grad = Some(sum);
            self.st_mut(input).grad_from_matmul = false;
            self.drop_grad(old);
            self.drop_grad(new);
        }
    }

    /// Removes the most recent node without running its backward, handing
    /// back what it held (a checkpoint boundary, resumed by the caller).
    pub fn pop_node(&mut self) -> Option<Detached> {
        let node = self.nodes.pop()?;
        Some(Detached {
            output: node.output,
            saved: node.saved,
            extra: node.extra,
        })
    }

    /// Releases what a popped node held.
    pub fn release_detached(&mut self, d: Detached) {
        if let Some(t) = d.extra {
            self.replay.free(t);
        }
        for s in d.saved.iter().flatten() {
            self.release(*s);
        }
    }

    /// Moves a value's gradient out (for chaining checkpointed segments).
    pub fn take_grad(&mut self, v: Value) -> Option<Tensor> {
        self.st_mut(v).grad.take()
    }

    /// Sets a value's gradient.
    pub fn set_grad(&mut self, v: Value, g: Tensor) {
        self.st_mut(v).grad = Some(g);
    }

    /// Gradient bytes held as `.grad` by leaf parameters.
    pub fn has_grad(&self, v: Value) -> bool {
        self.st(v).grad.is_some()
    }

    /// `optimizer.zero_grad(set_to_none=True)`: frees every `.grad`, and any
    /// gradient left on non-leaf values.
    pub fn zero_grad(&mut self) {
        for i in 0..self.values.len() {
            if let Some(g) = self.values[i].grad.take() {
                self.drop_grad(g);
            }
            self.values[i].grad_from_matmul = false;
        }
    }

    /// Drops every recorded node without running backward (no-grad exit, or
    /// an exception), releasing what they saved.
    pub fn discard_nodes(&mut self, mark: usize) {
        while self.nodes.len() > mark {
            let node = self.nodes.pop().expect("non-empty");
            if let Some(t) = node.extra {
                self.replay.free(t);
            }
            for s in node.saved.iter().flatten() {
                self.release(*s);
            }
        }
    }
}

/// A node taken off the tape by [`Graph::pop_node`].
#[derive(Debug)]
pub struct Detached {
    /// The node's output.
    pub output: Value,
    saved: [Option<Value>; 4],
    extra: Option<Tensor>,
}

fn saved_component(c: Component) -> Component {
    match c {
        Component::Transient => Component::Activations,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::AllocatorConfig;

    /// Allocations made by the backward of `loss(h1 + h2)`, with `h1` and
    /// `h2` computed from one parameter, the sum marked as an addition or not.
    fn backward_allocations(addition: bool) -> u64 {
        const MIB: u64 = 1 << 20;
        let mut replay = Replay::new(AllocatorConfig::default(), None);
        let mut g = Graph::new(&mut replay);
        g.grad_mode = true;
        let p = g.param(4 * MIB, true);
        let h1 = g.op("h1", &[p], 8 * MIB, Component::Transient, Saves::NOTHING);
        let h2 = g.op("h2", &[p], 8 * MIB, Component::Transient, Saves::NOTHING);
        let sum = g.op(
            "sum",
            &[h1, h2],
            8 * MIB,
            Component::Transient,
            Saves::NOTHING,
        );
        if addition {
            g.mark_addition(sum);
        }
        g.drop_all(&[h1, h2]);
        let loss = g.op("loss", &[sum], 4, Component::Transient, Saves::NOTHING);
        g.drop(sum);
        let before = g.replay.allocations();
        g.backward(loss);
        g.zero_grad();
        g.drop(loss);
        let after = g.replay.allocations();
        drop(g);
        assert_eq!(
            replay.stats().allocated,
            4 * MIB,
            "only the parameter is left"
        );
        after - before
    }

    #[test]
    fn an_addition_hands_its_gradient_to_both_operands() {
        // Seed, the sum's gradient, and the parameter's gradient from each
        // branch (the second accumulated into the first); an unmarked op
        // allocates a gradient for each operand too.
        assert_eq!(backward_allocations(true), 4);
        assert_eq!(backward_allocations(false), 6);
    }

    /// A residual block as torchvision writes it: `out = f(x); out +=
    /// identity; out.relu_()`, where `identity` comes from its own
    /// parameter. Returns the allocations of backward and whether the
    /// identity's parameter got a gradient.
    fn residual_backward(inplace_add: bool) -> (u64, bool) {
        const MIB: u64 = 1 << 20;
        let mut replay = Replay::new(AllocatorConfig::default(), None);
        let mut g = Graph::new(&mut replay);
        g.grad_mode = true;
        let p = g.param(4 * MIB, true);
        let q = g.param(4 * MIB, true);
        let identity = g.op(
            "identity",
            &[q],
            8 * MIB,
            Component::Transient,
            Saves::NOTHING,
        );
        let out = g.op("f", &[p], 8 * MIB, Component::Transient, Saves::NOTHING);
        if inplace_add {
            g.inplace_add("out += identity", out, identity);
        }
        g.drop(identity);
        g.inplace("relu_", out, true);
        let loss = g.op("loss", &[out], 4, Component::Transient, Saves::NOTHING);
        g.drop(out);
        let before = g.replay.allocations();
        g.backward(loss);
        let identity_reached = g.st(q).grad.is_some();
        g.zero_grad();
        g.drop(loss);
        (g.replay.allocations() - before, identity_reached)
    }

    #[test]
    fn an_in_place_add_shares_its_gradient_and_relu_writes_a_fresh_one() {
        // Seed, loss gradient, relu's fresh gradient, then each branch's
        // parameter gradient (the sum's gradient is shared, not copied).
        assert_eq!(residual_backward(true), (5, true));
        // Without the add the identity's parameter gets nothing.
        assert_eq!(residual_backward(false), (4, false));
    }
}
