//! Optimizer steps as `torch.optim` runs them on CUDA (foreach, the
//! default there, fused or one parameter at a time), and training-loop
//! plumbing shared by the families.

use super::nn::Ctx;
use crate::component::Component;
use crate::graph::{Graph, Value};
use crate::trace::Tensor;
use crate::workload::{Optimizer, OptimizerImpl, TrainingOptions};
use alloc::vec::Vec;

/// A trainable parameter: its value and shape (rows x cols; cols = 1 for vectors).
#[derive(Clone, Copy, Debug)]
pub struct Trainable {
    /// The parameter.
    pub value: Value,
    /// Bytes per element.
    pub dsize: u64,
    /// Rows (first dims flattened).
    pub rows: u64,
    /// Columns (last dim), 1 for vectors.
    pub cols: u64,
}

impl Trainable {
    fn bytes(&self) -> u64 {
        self.rows * self.cols * self.dsize
    }
}

/// Optimizer state that persists across steps.
#[derive(Debug, Default)]
pub struct OptimizerState {
    tensors: Vec<Tensor>,
    /// bitsandbytes' quantization maps, shared by every 8-bit state.
    qmaps: Option<[Tensor; 2]>,
}

/// Bytes of AdamW's `step` counter when it lives on the GPU (fused): a
/// zero-dimensional fp32 tensor (`_get_scalar_dtype(is_fused=True)`).
const FUSED_STEP_BYTES: u64 = 4;

/// bitsandbytes' optimizers: parameters under this many values keep
/// fp32 state (`min_8bit_size`).
const BNB_MIN_8BIT_SIZE: u64 = 4096;
/// bitsandbytes' paged optimizers page the state of parameters of at least
/// this many values (`get_state_buffer`: `p.numel() < 1e5` stays on the GPU).
const BNB_MIN_PAGED_SIZE: u64 = 100_000;
/// Values per absmax of bitsandbytes' blockwise 8-bit state.
const BNB_STATE_BLOCK: u64 = 256;
/// Bytes of each of the two 256-entry quantization maps (`dynamic`,
/// `udynamic`) an 8-bit bitsandbytes optimizer moves to the GPU once.
const BNB_QMAP_BYTES: u64 = 256 * 4;

/// bitsandbytes' `Optimizer2State.init_state` for one parameter: two
/// moments (8-bit with two fp32 absmax vectors, or fp32), in unified
/// memory when paged and large enough.
fn allocate_bnb_state(
    g: &mut Graph,
    p: &Trainable,
    eight_bit: bool,
    paged: bool,
    state: &mut OptimizerState,
) {
    let values = p.rows * p.cols;
    let eight_bit = eight_bit && values >= BNB_MIN_8BIT_SIZE;
    if eight_bit && state.qmaps.is_none() {
        let dynamic = g.replay.alloc(BNB_QMAP_BYTES, Component::OptimizerState);
        let udynamic = g.replay.alloc(BNB_QMAP_BYTES, Component::OptimizerState);
        state.qmaps = Some([dynamic, udynamic]);
    }
    let moment = if eight_bit { values } else { values * 4 };
    for _ in 0..2 {
        if paged && values >= BNB_MIN_PAGED_SIZE {
            g.replay.add_managed(moment);
        } else {
            state
                .tensors
                .push(g.replay.alloc(moment, Component::OptimizerState));
        }
    }
    if eight_bit {
        let absmax = values.div_ceil(BNB_STATE_BLOCK) * 4;
        for _ in 0..2 {
            state
                .tensors
                .push(g.replay.alloc(absmax, Component::OptimizerState));
        }
    }
}

/// Allocates the state of one parameter, as `_init_group` does.
fn allocate_state(g: &mut Graph, t: &TrainingOptions, p: &Trainable, state: &mut OptimizerState) {
    match t.optimizer {
        Optimizer::Adamw8bit => allocate_bnb_state(g, p, true, false, state),
        Optimizer::PagedAdamw8bit => allocate_bnb_state(g, p, true, true, state),
        Optimizer::PagedAdamw32bit => allocate_bnb_state(g, p, false, true, state),
        // state["step"] (a GPU tensor when fused, else a CPU one), then
        // exp_avg, exp_avg_sq = zeros_like(p), zeros_like(p)
        Optimizer::Adamw => {
            if t.implementation == OptimizerImpl::Fused {
                state
                    .tensors
                    .push(g.replay.alloc(FUSED_STEP_BYTES, Component::OptimizerState));
            }
            state
                .tensors
                .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
            state
                .tensors
                .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
        }
        // momentum_buffer = torch.clone(grad).detach()
        Optimizer::SgdMomentum => state
            .tensors
            .push(g.replay.alloc(p.bytes(), Component::OptimizerState)),
        Optimizer::Sgd => {}
        // factored second moments: a row and a column vector per matrix
        Optimizer::Adafactor => {
            if p.cols > 1 {
                state
                    .tensors
                    .push(g.replay.alloc(p.rows * 4, Component::OptimizerState));
                state
                    .tensors
                    .push(g.replay.alloc(p.cols * 4, Component::OptimizerState));
            } else {
                state
                    .tensors
                    .push(g.replay.alloc(p.bytes(), Component::OptimizerState));
            }
        }
    }
}

/// Allocates the optimizer state up front (a run resumed with its
/// optimizer state already on the GPU).
pub fn preallocate(
    g: &mut Graph,
    t: &TrainingOptions,
    params: &[Trainable],
    state: &mut OptimizerState,
) {
    g.at("optimizer state (resident)", None);
    for p in params {
        allocate_state(g, t, p, state);
    }
}

/// One `optimizer.step()`; creates the state on the first call
/// (`_init_group`: per parameter, in order).
pub fn step(g: &mut Graph, t: &TrainingOptions, params: &[Trainable], state: &mut OptimizerState) {
    let optimizer = t.optimizer;
    if state.tensors.is_empty() && optimizer != Optimizer::Sgd {
        g.at(
            match optimizer {
                Optimizer::Adamw => "optimizer: AdamW state init (exp_avg, exp_avg_sq)",
                Optimizer::SgdMomentum => "optimizer: SGD momentum buffers",
                Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit => {
                    "optimizer: bitsandbytes AdamW state init"
                }
                _ => "optimizer: Adafactor state init (row/col variances)",
            },
            None,
        );
        for p in params {
            allocate_state(g, t, p, state);
        }
    }
    // Parameter-sized temporaries: AdamW's `exp_avg_sq.sqrt()` and its
    // division by the bias correction (foreach: `_foreach_sqrt` over every
    // parameter, then in place; for-loop: `(exp_avg_sq.sqrt() / bc).add_(eps)`
    // for one parameter at a time, two temporaries); Adafactor's
    // `row_var @ col_var` variance estimate (fp32) for every matrix. Fused
    // kernels and SGD update in place.
    let temporaries: Option<(&'static str, TemporaryBytes)> = match optimizer {
        Optimizer::Adamw => Some(("optimizer: AdamW step (_foreach_sqrt temporaries)", |p| {
            p.bytes()
        })),
        Optimizer::Adafactor => Some(("optimizer: Adafactor step (variance estimates)", |p| {
            p.rows * p.cols * 4
        })),
        // bitsandbytes' kernels update in place.
        Optimizer::Sgd
        | Optimizer::SgdMomentum
        | Optimizer::Adamw8bit
        | Optimizer::PagedAdamw8bit
        | Optimizer::PagedAdamw32bit => None,
    };
    let Some((name, bytes)) = temporaries else {
        return;
    };
    match t.implementation {
        OptimizerImpl::Fused => {}
        OptimizerImpl::Foreach => {
            g.at(name, None);
            let temps: Vec<Tensor> = params
                .iter()
                .map(|p| g.replay.alloc(bytes(p), Component::OptimizerState))
                .collect();
            g.replay.free_all(temps);
        }
        OptimizerImpl::ForLoop => {
            g.at("optimizer: step, one parameter at a time", None);
            let per_param = if optimizer == Optimizer::Adamw { 2 } else { 1 };
            for p in params {
                let temps: Vec<Tensor> = (0..per_param)
                    .map(|_| g.replay.alloc(bytes(p), Component::OptimizerState))
                    .collect();
                g.replay.free_all(temps);
            }
        }
    }
}

/// Bytes of one parameter's optimizer-step temporary.
type TemporaryBytes = fn(&Trainable) -> u64;

/// Bytes of each of `GradScaler`'s tensors: zero-dimensional fp32 or
/// int32 scalars (the allocator gives each a 512-byte small block).
const SCALAR_BYTES: u64 = 4;

/// `torch.amp.GradScaler`, which fp16 mixed precision runs around every
/// step (`amp_fp16`): only scalars on the GPU, so it never reaches the
/// large pool, but its small blocks can open a small segment.
#[derive(Default)]
pub(crate) struct GradScaler {
    /// `_scale` and `_growth_tracker`, made on the first `scale(loss)`.
    persistent: Option<[Tensor; 2]>,
}

impl GradScaler {
    /// The scaler a precision runs with: `amp_fp16` only (bf16's range
    /// needs no loss scaling).
    pub(crate) fn for_precision(precision: crate::workload::Precision) -> Option<GradScaler> {
        (precision == crate::workload::Precision::AmpFp16).then(GradScaler::default)
    }

    /// `scaler.scale(loss)`: `loss * self._scale`, the value backward
    /// starts from (the caller drops it with the loss).
    pub(crate) fn scale(&mut self, g: &mut Graph, loss: Value) -> Value {
        g.at("GradScaler: scale(loss)", None);
        if self.persistent.is_none() {
            let scale = g.replay.alloc(SCALAR_BYTES, Component::Transient);
            let growth_tracker = g.replay.alloc(SCALAR_BYTES, Component::Transient);
            self.persistent = Some([scale, growth_tracker]);
        }
        g.op(
            "mul: scaled loss",
            &[loss],
            SCALAR_BYTES,
            Component::Transient,
            crate::graph::Saves::NOTHING,
        )
    }

    /// `optimizer.step()`, through `scaler` when there is one.
    pub(crate) fn step_with(
        scaler: &mut Option<GradScaler>,
        g: &mut Graph,
        optimizer_step: impl FnOnce(&mut Graph),
    ) {
        match scaler {
            Some(scaler) => scaler.step(g, optimizer_step),
            None => optimizer_step(g),
        }
    }

    /// `scaler.step(optimizer)` and `scaler.update()` around the optimizer
    /// step: `unscale_` makes `inv_scale` (through a float64 reciprocal)
    /// and `found_inf`, checks and unscales the gradients in place, and
    /// both live until `update()` has adjusted the scale in place.
    fn step(&mut self, g: &mut Graph, optimizer_step: impl FnOnce(&mut Graph)) {
        g.at("GradScaler: unscale_ (found_inf, inv_scale)", None);
        let scale_f64 = g.replay.alloc(2 * SCALAR_BYTES, Component::Transient);
        let reciprocal = g.replay.alloc(2 * SCALAR_BYTES, Component::Transient);
        let inv_scale = g.replay.alloc(SCALAR_BYTES, Component::Transient);
        g.replay.free_all([scale_f64, reciprocal]);
        let found_inf = g.replay.alloc(SCALAR_BYTES, Component::Transient);
        optimizer_step(g);
        g.at("GradScaler: update()", None);
        g.replay.free_all([inv_scale, found_inf]);
    }
}

/// The training loop every family runs, step after step: a forward under the
/// precision's autocast/dtype context that returns the scalar loss (every
/// other tensor already dropped), leaving autocast, `loss.backward()`,
/// `optimizer.step()`, `zero_grad(set_to_none=True)`.
pub fn train_steps(
    g: &mut Graph,
    t: &TrainingOptions,
    trainable: &[Trainable],
    mut forward_loss: impl FnMut(&mut Graph, &mut Ctx) -> Value,
) {
    train_steps_inner(g, t, trainable, &mut forward_loss, None);
}

/// [`train_steps`] for a forward with checkpointed segments: backward
/// recomputes segment `segment` from its saved `input` with
/// `recompute(graph, cx, segment, input)`, which returns the segment's
/// output (see [`Graph::backward_recomputing`]).
pub fn train_steps_recomputing(
    g: &mut Graph,
    t: &TrainingOptions,
    trainable: &[Trainable],
    mut forward_loss: impl FnMut(&mut Graph, &mut Ctx) -> Value,
    mut recompute: impl FnMut(&mut Graph, &mut Ctx, u32, Value) -> Value,
) {
    train_steps_inner(g, t, trainable, &mut forward_loss, Some(&mut recompute));
}

/// The ends of training steps, to stop replaying at the steady state
/// ([`super::ReplayOptions::steady_state_shortcut`]). From the third step
/// on, the program of a step is the same every time (the optimizer state
/// exists, DDP has rebuilt its buckets), so a step that ends in the state
/// a step since the first ended in starts a cycle that repeats: every
/// later step replays one of the cycle's (each started from the state the
/// step it repeats started from). Mostly the cycle is one step; an
/// inference loop's is longer (each batch's input is made before the last
/// one is released, so inputs and outputs rotate through a few blocks).
/// The micro-batches of one step, and an inference loop's batches,
/// likewise.
///
/// At a card's end there is no such cycle: a job that empties its cache
/// to go on (PyTorch's retry after a failed `cudaMalloc`) ends each step
/// in a new arrangement of segments. The replay follows it for
/// [`STEPS_PAST_THE_CARDS_END`] steps after the one that first emptied
/// the cache (and at least three steps), and stops there.
#[derive(Default)]
pub(crate) struct SteadyState {
    /// The states after the latest steps from the second on, oldest first.
    recent: Vec<Vec<u64>>,
    /// The step in which the replay first emptied its cache at the card's end.
    first_release: Option<u32>,
}

/// Longest cycle of steps looked for.
const STEADY_CYCLE: usize = 8;

/// Steps replayed after the one in which a job first emptied its cache at
/// the card's end (see [`SteadyState`]). Each step there ends in a new
/// arrangement, so no count is exact; a step of the same program, replayed
/// again from where the release left the cache, is what a search needs to
/// see whether the job survives its release. Without this bound the work
/// of a search grew with the job's steps (`gpus` on a 1,000-step FSDP2 job
/// took minutes), for no better answer: whether a job that lives by
/// emptying its cache survives to its last step is not something the
/// allocator's rules decide (measurements/emulated-cards/README.md).
pub const STEPS_PAST_THE_CARDS_END: u32 = 2;

impl SteadyState {
    /// Called after step `index` (0-based) ended: whether the steps after
    /// it would repeat the ones before (or, at the card's end, whether the
    /// replay has followed the job far enough).
    pub(crate) fn reached(&mut self, g: &mut Graph, index: u32) -> bool {
        g.reclaim_dropped_values();
        if g.replay.stats().cache_flushes > 0 && self.first_release.is_none() {
            self.first_release = Some(index);
        }
        if index == 0 || !g.replay.stops_at_steady_state() {
            return false;
        }
        if let Some(first) = self.first_release {
            return index >= 2 && index >= first + STEPS_PAST_THE_CARDS_END;
        }
        let now = g.replay.state_signature();
        let repeats = index >= 2 && self.recent.contains(&now);
        if self.recent.len() == STEADY_CYCLE {
            self.recent.remove(0);
        }
        self.recent.push(now);
        repeats
    }
}

type Recompute<'a> = &'a mut dyn FnMut(&mut Graph, &mut Ctx, u32, Value) -> Value;

/// The loop itself, once for every family (closures behind `dyn`: one copy
/// of this code in the wasm bundle).
fn train_steps_inner(
    g: &mut Graph,
    t: &TrainingOptions,
    trainable: &[Trainable],
    forward_loss: &mut dyn FnMut(&mut Graph, &mut Ctx) -> Value,
    mut recompute: Option<Recompute>,
) {
    let mut state = OptimizerState::default();
    if t.optimizer_state_resident {
        preallocate(g, t, trainable, &mut state);
    }
    let mut steady = SteadyState::default();
    let mut scaler = GradScaler::for_precision(t.precision);
    for index in 0..t.steps {
        g.replay.step(Some(index));
        // Gradient accumulation: every micro-batch's backward adds into the
        // `.grad` the ones before it left (see [`Graph::backward`]); from
        // the second on they run one program, so once one ends in the state
        // the one before it ended in, the rest repeat it.
        let mut micro_steady = SteadyState::default();
        for micro in 0..t.gradient_accumulation_steps {
            g.grad_mode = true;
            let mut cx = Ctx::for_precision(t.precision);
            let loss = forward_loss(g, &mut cx);
            cx.exit_autocast(g);
            let scaled = scaler.as_mut().map(|s| s.scale(g, loss));
            g.at("backward", None);
            let from = scaled.unwrap_or(loss);
            match recompute.as_mut() {
                Some(recompute) => g.backward_recomputing(from, &mut |g, segment, input| {
                    recompute(g, &mut cx, segment, input)
                }),
                None => g.backward(from),
            }
            g.drop(loss);
            if let Some(scaled) = scaled {
                g.drop(scaled);
            }
            g.grad_mode = false;
            if micro_steady.reached(g, micro) {
                break;
            }
        }
        GradScaler::step_with(&mut scaler, g, |g| step(g, t, trainable, &mut state));
        g.at("zero_grad(set_to_none=True)", None);
        g.zero_grad();
        if steady.reached(g, index) {
            break;
        }
    }
}
