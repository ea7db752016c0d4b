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
//!   as `.grad` until [`Graph::zero_grad`]; a later backward (gradient
//!   accumulation) adds into it in place.
//!
//! This file holds the values and their holders; `ops.rs` the ops (what
//! each allocates, and what its node keeps: [`Saves`]); `backward.rs` the
//! autograd engine and checkpoint recompute; `units.rs` what data-parallel
//! wrappers do (storage that comes and goes, per-layer backward events).

use crate::component::Component;
use crate::trace::{Replay, Tensor};
use alloc::vec::Vec;

mod backward;
mod ops;
mod units;
pub use ops::Saves;
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
    /// The gradient is a view: every gradient a matrix multiply makes is
    /// one (the weight's, `mm(...).t()`; the input's, the `reshape` of an
    /// `mm` over the (batch, sequence, features) input folded to 2-D). A
    /// view keeps its base alive, so its storage has two users and
    /// `InputBuffer::accumulate` does not add into it in place (see
    /// [`Graph::accumulate`]).
    grad_is_view: bool,
    /// A view's base (see [`Graph::slice`]): held until the view goes.
    base: Option<Value>,
}

/// Values one op can save for backward, its output included (SDPA with a
/// mask: the query, key, value, bias and output).
pub const SAVED_SLOTS: usize = 5;

#[derive(Clone, Debug)]
struct Node {
    name: &'static str,
    layer: Option<u32>,
    inputs: [Option<Value>; 3],
    saved: [Option<Value>; SAVED_SLOTS],
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
    /// The fp32 memory-efficient attention backward's row sums (see
    /// [`Graph::set_backward_row_sums`]): zero for other ops.
    backward_row_sums: u64,
    /// A checkpointed segment: backward stops here and hands control back.
    checkpoint: Option<u32>,
    /// A checkpoint boundary's count of the segment's ops that saved
    /// tensors in its forward (see [`SavedTensorHooks`]): its recompute
    /// stops after the last of them. None: the segment was run without
    /// counting, and its recompute runs whole.
    saving_ops: Option<u32>,
    /// A matrix multiply (see [`Graph::mark_gemm`]).
    gemm: Option<GradOrder>,
    /// An addition (see [`Graph::mark_addition`]).
    addition: bool,
    /// A product: the second operand's gradient first (see [`Graph::mark_product`]).
    other_grad_first: bool,
    /// A product's operands of a narrower dtype than its output: the bytes
    /// of each one's gradient as computed, in the output's dtype, before
    /// the engine casts it to the operand's (zero: none).
    wide_grads: [u64; 2],
    /// Each input's gradient is a view of the incoming one (see
    /// [`Graph::mark_view_grads`]).
    grads_are_views: bool,
    /// One of `unbind`'s views: its base's gradient is one stacked tensor
    /// the first view's backward makes (see [`Graph::unbind`]).
    stacked: bool,
    /// Recorded in a checkpoint's recompute: its saved tensors are
    /// released as its backward function returns, before its broadcast
    /// gradients are reduced and its incoming gradient is released (after,
    /// for a node recorded in forward). The H200 trace of Llama-3.2-1B
    /// bf16 training with checkpointing
    /// (`measurements/h200-generalization/trace-segments-28.jsonl.gz`,
    /// events 1,125 to 1,131): RMSNorm's `weight * x` backward frees the
    /// saved `x` before the weight gradient's reduction buffer.
    recomputed: bool,
    /// An in-place op on `output` ([`Graph::inplace`], [`Graph::inplace_add`]).
    in_place: bool,
    /// `backward_scratch` holds one kernel's workspace per input: each is
    /// taken right after that input's gradient (see
    /// [`Graph::set_backward_kernels`]).
    scratch_per_input: bool,
    /// Temporaries of the backward formula, each the size of the first
    /// input: C++ keeps an expression's temporaries until the statement
    /// ends, so they are all allocated before the gradient and freed,
    /// newest first, once it exists (see [`Graph::set_backward_temporaries`]).
    backward_temporaries: u8,
    /// Buffers a gradient is computed through after the node's gradients
    /// exist, each taken while the ones before it are held, then freed
    /// newest first (see [`Graph::set_backward_nested`]).
    backward_nested: [u64; 2],
}

impl Node {
    /// A node named `name` producing `output`, with no inputs, saved
    /// tensors, buffers or marks yet.
    fn new(name: &'static str, layer: Option<u32>, output: Value) -> Node {
        Node {
            name,
            layer,
            inputs: [None; 3],
            saved: [None; SAVED_SLOTS],
            extra: None,
            output,
            backward_workspace: 0,
            backward_scratch: [0; 2],
            backward_row_sums: 0,
            checkpoint: None,
            saving_ops: None,
            gemm: None,
            addition: false,
            other_grad_first: false,
            wide_grads: [0; 2],
            grads_are_views: false,
            stacked: false,
            recomputed: false,
            in_place: false,
            scratch_per_input: false,
            backward_temporaries: 0,
            backward_nested: [0; 2],
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

/// Non-reentrant checkpointing's saved-tensor hooks
/// (`torch.utils.checkpoint`, `use_reentrant=False`, the default of
/// transformers' `gradient_checkpointing_enable()`). In a checkpointed
/// segment's forward every tensor an op saves for backward is packed into
/// a placeholder and counted, none kept; in its recompute the hook counts
/// again and, with early stop (PyTorch's default), raises as soon as the
/// last of them is packed: the rest of the segment never runs, and the
/// exception frees what the segment's frames held. An op packs the inputs
/// it saves before its kernel runs and the outputs and buffers it saves
/// after. The H200 trace of a checkpointed Llama-3.2-1B reward model
/// (`measurements/h200-generalization/trace-segments-27b.jsonl.gz`,
/// events 1,456 to 1,462): each recompute allocates the MLP's product and
/// frees it, with the norm's output and the residual, without `down_proj`
/// (frozen: it saves only its weight, packed before its kernel) or the
/// residual addition ever allocating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SavedTensorHooks {
    /// No hooks: ops save what they save.
    Off,
    /// A checkpointed segment's forward: the ops that saved so far.
    Placeholders { saving_ops: u32 },
    /// A recompute: the saving ops still to run before it stops.
    Recompute { saving_ops_left: u32 },
    /// The recompute stopped: later ops record their nodes (backward runs
    /// through them) but allocate nothing.
    Stopped,
    /// A dry run of a recompute, to learn which of its last ops save
    /// nothing (see [`Graph::recompute_for_backward`]): every op records
    /// its node, none allocates.
    Rehearsal,
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
    /// The segment's ops that saved tensors in its forward, if counted.
    pub saving_ops: Option<u32>,
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
    /// Checkpointing's saved-tensor hooks, when a segment runs.
    hooks: SavedTensorHooks,
    /// Values ops of the checkpointed segment being run keep outside the
    /// saved-tensor hooks ([`Graph::keep_outside_hooks`]); the segment's
    /// boundary holds them until its backward.
    kept_outside_hooks: Vec<Value>,
    /// A checkpoint's recompute is running (its nodes are `recomputed`).
    recomputing: bool,
    /// A parameter's gradient is copied into a buffer of its own and freed
    /// as soon as it exists (DDP with `gradient_as_bucket_view`: `.grad`
    /// becomes a view of the bucket).
    pub leaf_grads_copied_out: bool,
    /// Parameters in the order their gradients became ready in backward
    /// (the last contribution of each, as autograd's `AccumulateGrad` runs
    /// it), when recording: DDP's reducer rebuilds its buckets in this
    /// order ([`Graph::record_grad_ready_order`]).
    grad_ready_order: Option<Vec<Value>>,
    layer: Option<u32>,
    /// Bytes of every parameter created, when recording (see [`Graph::record_params`]).
    param_log: Option<Vec<u64>>,
    /// fp32 copies from a build-then-cast load, freed one per new parameter.
    staged: Vec<Tensor>,
    /// cuBLAS workspaces a fresh process creates lazily: the forward
    /// thread's at its first matmul ([`Graph::gemm`]), the autograd
    /// thread's at the first backward matmul ([`Graph::mark_gemm`]).
    pending_workspaces: [u64; 2],
    /// The cuBLASLt workspace a fresh process creates at its first
    /// `addmm` with a bias ([`Graph::lt_gemm`]).
    pending_lt_workspace: u64,
    /// Gradients held by more than one input buffer (an addition hands its
    /// gradient to each operand as is): the tensor and its extra holders.
    shared_grads: Vec<(Tensor, u32)>,
    /// Gradient accumulation: the `.grad` an earlier backward left on each
    /// leaf parameter (by value index), set aside while this backward
    /// runs, with the contributions still to come before `AccumulateGrad`
    /// adds the new gradient into it. Empty unless a backward started with
    /// gradients held.
    earlier_grads: Vec<Option<(Tensor, u32)>>,
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
            hooks: SavedTensorHooks::Off,
            kept_outside_hooks: Vec::new(),
            recomputing: false,
            leaf_grads_copied_out: false,
            grad_ready_order: None,
            layer: None,
            param_log: None,
            staged: Vec::new(),
            pending_workspaces: [0; 2],
            pending_lt_workspace: 0,
            shared_grads: Vec::new(),
            earlier_grads: Vec::new(),
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
    /// the first matmul, `autograd` bytes at the first backward matmul, `lt`
    /// bytes (cuBLASLt's) at the first `addmm` with a bias (0: none).
    pub fn defer_workspaces(&mut self, forward: u64, autograd: u64, lt: u64) {
        self.pending_workspaces = [forward, autograd];
        self.pending_lt_workspace = lt;
    }

    /// A matmul runs: a fresh process's forward cuBLAS handle allocates its
    /// workspace now (kept for the life of the process).
    pub fn gemm(&mut self) {
        let bytes = core::mem::take(&mut self.pending_workspaces[0]);
        if bytes > 0 {
            let _kept = self.replay.alloc(bytes, Component::LibraryWorkspace);
        }
    }

    /// An `addmm` with a bias ran through cuBLASLt's bias epilogue
    /// (`gemm_and_bias`: a 2-D or contiguous input of more than one row):
    /// a fresh process creates the cuBLASLt workspace now, after the cuBLAS
    /// one (kept for the life of the process).
    pub fn lt_gemm(&mut self) {
        self.gemm();
        let bytes = core::mem::take(&mut self.pending_lt_workspace);
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

    /// A parameter copied into another memory layout in place
    /// (`model.to(memory_format=torch.channels_last)` on the GPU): its new
    /// block, then the old one freed, which stays cached.
    pub fn relayout_param(&mut self, v: Value) {
        let bytes = self.st(v).bytes;
        let copy = self.replay.alloc(bytes, Component::Weights);
        let old = self.st_mut(v).storage.replace(copy);
        if let Some(old) = old {
            self.replay.free(old);
        }
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
            grad_is_view: false,
            base: None,
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
            grad_is_view: false,
            base: None,
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
            let base = s.base.take();
            if let Some(t) = s.storage.take() {
                self.replay.free(t);
            }
            if let Some(base) = base {
                self.release(base);
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

    /// At a step's end, with no autograd nodes left: every value the step
    /// dropped while nodes could still name it becomes a slot for new
    /// values, as [`Graph::release`] makes one without nodes. Without it a
    /// training job's values grow by every tensor of every step, and so does
    /// the work of each step after them.
    pub fn reclaim_dropped_values(&mut self) {
        if !self.nodes.is_empty() {
            return;
        }
        self.reusable.clear();
        for (index, v) in self.values.iter().enumerate() {
            if v.refs == 0 {
                self.reusable.push(index as u32);
            }
        }
        #[cfg(debug_assertions)]
        for &index in &self.reusable {
            self.generations[index as usize] += 1;
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
}

/// A node taken off the tape by [`Graph::pop_node`].
#[derive(Debug)]
pub struct Detached {
    /// The node's output.
    pub output: Value,
    saved: [Option<Value>; SAVED_SLOTS],
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
