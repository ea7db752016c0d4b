//! Building blocks shared by the families: PyTorch ops with their
//! allocations, the tensors autograd saves, and autocast's dtype rules.
//!
//! This file holds the tensor handle ([`T`]), the parameter builder
//! ([`Params`]), the forward context and autocast ([`Ctx`], [`cast`]) and
//! the elementwise ops ([`mul`], [`add`], [`unary`], [`dropout`]);
//! `linear.rs` the linear maps, `norm.rs` the normalisation layers,
//! `attention.rs` attention and rotary embeddings, `loss.rs` the losses.
//! Everything is re-exported here: callers write `nn::linear`, `nn::sdpa`.

use crate::component::Component;
use crate::graph::{Graph, Saves, Value};
use alloc::vec::Vec;

mod attention;
pub mod bnb;
mod linear;
mod loss;
mod norm;

pub use attention::{
    eager_attention, repeat_kv, rotary, rotary_tables, rotate_half, sdpa, sdpa_math,
    sdpa_on_every_head, sdpa_with_mask, sliding_window_mask_needed, AttnShape, EagerSoftmax,
    Operands,
};
pub use linear::{
    column_sum_buffer, embedding_backward_scratch, linear, linear_by, Kernel, Linear,
};
pub use loss::{causal_lm_loss, cross_entropy, mse_loss};
pub use norm::{gemma_rms_norm, layer_norm, rms_norm};

/// A tensor handle with its element count and element size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct T {
    /// The value in the graph.
    pub v: Value,
    /// Elements.
    pub elems: u64,
    /// Bytes per element.
    pub dsize: u64,
}

impl T {
    /// Bytes of the tensor.
    pub fn bytes(&self) -> u64 {
        self.elems * self.dsize
    }
}

/// bf16 / fp16 element size.
pub const BF16: u64 = 2;

/// fp32 element size.
pub const FP32: u64 = 4;

/// int64 element size (token ids, labels, pooling indices).
pub const INT64: u64 = 8;

/// The parameters' dtype: the training precision's (fp32 master weights
/// under `amp_bf16`, `amp_fp16` and `fp32`; bf16 or fp16 for `bf16` and
/// `fp16`), else the inference dtype.
pub fn param_dtype(workload: &crate::workload::Workload) -> crate::arch::Dtype {
    use crate::arch::Dtype;
    use crate::workload::{Mode, Precision};
    if workload.mode == Mode::Training {
        match workload.training.precision {
            p if p.fp32_parameters() => Dtype::Fp32,
            Precision::Fp16 => Dtype::Fp16,
            _ => Dtype::Bf16,
        }
    } else {
        workload.dtype
    }
}

/// Element size of the parameters: the training precision's (fp32 master
/// weights under `amp_bf16`, `amp_fp16` and `fp32`, 2 bytes for `bf16` and
/// `fp16`), else the
/// inference dtype (quantised dtypes keep bf16 for what they do not quantise).
pub fn param_dsize(workload: &crate::workload::Workload) -> u64 {
    use crate::workload::Mode;
    if workload.mode == Mode::Training {
        if workload.training.precision.fp32_parameters() {
            FP32
        } else {
            BF16
        }
    } else if workload.dtype.is_float() {
        workload.dtype.bytes()
    } else {
        BF16
    }
}

/// Whether the job's 2-byte tensors are fp16 (training under `amp_fp16`
/// or `fp16`; inference in fp16) rather than bf16.
pub fn half_is_fp16(workload: &crate::workload::Workload) -> bool {
    match workload.mode {
        crate::workload::Mode::Training => workload.training.precision.half_is_fp16(),
        crate::workload::Mode::Inference => workload.dtype == crate::arch::Dtype::Fp16,
    }
}

/// Allocates parameters in module order, counting them and listing the
/// trainable ones for the optimizer.
pub struct Params {
    /// Element size.
    pub dsize: u64,
    /// Whether parameters need gradients.
    pub trainable: bool,
    /// The trainable parameters, in order.
    pub list: Vec<super::optim::Trainable>,
    /// Parameters allocated (elements).
    pub count: u64,
}

impl Params {
    /// A builder for `dsize`-byte parameters.
    pub fn new(dsize: u64, trainable: bool) -> Params {
        Params {
            dsize,
            trainable,
            list: Vec::new(),
            count: 0,
        }
    }

    /// A `rows x cols` parameter.
    pub fn tensor(&mut self, g: &mut Graph, rows: u64, cols: u64) -> Value {
        let v = g.param(rows * cols * self.dsize, self.trainable);
        self.count += rows * cols;
        if self.trainable {
            self.list.push(super::optim::Trainable {
                value: v,
                dsize: self.dsize,
                rows,
                cols,
            });
        }
        v
    }

    /// An `nn.Linear(inp, out)` with bias.
    pub fn linear(&mut self, g: &mut Graph, inp: u64, out: u64) -> Linear {
        let weight = self.tensor(g, out, inp);
        let bias = Some(self.tensor(g, out, 1));
        Linear {
            weight,
            weight_dsize: self.dsize,
            bias,
            in_features: inp,
            out_features: out,
            lora: None,
            quantized: None,
        }
    }

    /// Bytes of the parameters allocated so far.
    pub fn bytes(&self) -> u64 {
        self.count * self.dsize
    }
}

/// Execution settings of a forward pass.
#[derive(Debug, Default)]
pub struct Ctx {
    /// `torch.autocast` (bfloat16 or float16) is active: matmuls run in
    /// 2 bytes on cast copies.
    pub autocast: bool,
    /// Element size of matmul outputs without autocast (weights' dtype).
    pub compute_dsize: u64,
    /// Autocast's cache of bf16 weight copies: (weight, copy).
    pub cast_cache: Vec<(Value, T)>,
    /// Cache weight casts. Autocast caches a leaf weight's cast whatever
    /// the grad mode, so a checkpointed layer's forward caches them too
    /// (the H200 trace of a checkpointed ZeRO-1 job: every layer's casts
    /// freed at `autocast.__exit__`); off in a checkpoint's recompute,
    /// whose own autocast region ends with the layer (the copies autograd
    /// saved live on until the layer's backward).
    pub cache_weight_casts: bool,
    /// The 2-byte activations are IEEE fp16 rather than bf16 (fp16
    /// inference), which some kernels treat differently.
    pub fp16: bool,
    /// LoRA adapters (fp32) on a bf16 base under `torch.autocast(bfloat16)`
    /// (`Trainer(bf16=True)`): the base runs as plain bf16, and each
    /// adapter's matmuls take bf16 copies of their fp32 input and weights.
    pub lora_autocast: bool,
    /// peft's `lora_dropout` is above 0: each adapter's input goes through
    /// `nn.Dropout` (an output and a saved bool mask) instead of
    /// `nn.Identity`.
    pub lora_dropout: bool,
}

impl Ctx {
    /// A context computing in `compute_dsize` without autocast.
    pub fn plain(compute_dsize: u64) -> Ctx {
        Ctx {
            autocast: false,
            compute_dsize,
            cast_cache: Vec::new(),
            cache_weight_casts: true,
            fp16: false,
            lora_autocast: false,
            lora_dropout: false,
        }
    }

    /// The context of a training precision: autocast for `amp_bf16` and
    /// `amp_fp16`, plain fp32 or 2-byte otherwise.
    pub fn for_precision(precision: crate::workload::Precision) -> Ctx {
        let mut cx = if precision.autocast() {
            Ctx::amp()
        } else if precision.fp32_parameters() {
            Ctx::plain(FP32)
        } else {
            Ctx::plain(BF16)
        };
        cx.fp16 = precision.half_is_fp16();
        cx
    }

    /// An autocast context (bf16; fp16 with [`Ctx::fp16`]) over fp32 weights.
    pub fn amp() -> Ctx {
        Ctx {
            autocast: true,
            compute_dsize: BF16,
            cast_cache: Vec::new(),
            cache_weight_casts: true,
            fp16: false,
            lora_autocast: false,
            lora_dropout: false,
        }
    }

    /// Leaves the autocast region: the weight-cast cache is cleared (copies
    /// still saved by autograd stay alive until backward releases them).
    pub fn exit_autocast(&mut self, g: &mut Graph) {
        for (_, copy) in self.cast_cache.drain(..) {
            g.drop(copy.v);
        }
    }
}

/// Casts `x` to `dsize` (`.to(dtype)`): a copy unless already that size.
/// The returned handle is a new holder the caller must drop.
pub fn cast(g: &mut Graph, x: T, dsize: u64, name: &'static str) -> T {
    if x.dsize == dsize {
        g.hold(x.v);
        return x;
    }
    let v = g.op(
        name,
        &[x.v],
        x.elems * dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    T {
        v,
        elems: x.elems,
        dsize,
    }
}

/// Autocast's cached bf16 copy of a weight (cast once per autocast region).
pub(crate) fn autocast_weight(
    g: &mut Graph,
    cx: &mut Ctx,
    w: Value,
    elems: u64,
    dsize: u64,
) -> (T, bool) {
    if let Some(&(_, copy)) = cx.cast_cache.iter().find(|(p, _)| *p == w) {
        return (copy, false);
    }
    let source = T { v: w, elems, dsize };
    let copy = if dsize == BF16 {
        g.hold(w);
        source
    } else {
        let v = g.op(
            "autocast: weight cast to bf16",
            &[w],
            elems * BF16,
            Component::Weights,
            Saves::NOTHING,
        );
        T {
            v,
            elems,
            dsize: BF16,
        }
    };
    if !cx.cache_weight_casts {
        // Uncached: the caller drops the copy after the op.
        return (copy, true);
    }
    cx.cast_cache.push((w, copy));
    (copy, false)
}

/// The shape and dtype of an elementwise op on `a` and `b`: the larger
/// operand's elements (broadcasting) in the wider dtype.
fn broadcast(a: T, b: T) -> (u64, u64) {
    (a.elems.max(b.elems), a.dsize.max(b.dsize))
}

/// `a * b` (broadcasting, promoting to the wider dtype): autograd keeps
/// each operand for the other's gradient (`a` when `b` needs one, `b`
/// when `a` does), and backward computes `b`'s gradient first
/// ([`Graph::mark_product`]).
pub fn mul(g: &mut Graph, a: T, b: T, name: &'static str) -> T {
    let (elems, dsize) = broadcast(a, b);
    let mut saved = Vec::new();
    if g.requires_grad(b.v) {
        saved.push(a.v);
    }
    if g.requires_grad(a.v) {
        saved.push(b.v);
    }
    let v = g.op(
        name,
        &[a.v, b.v],
        elems * dsize,
        Component::Transient,
        Saves::inputs(&saved),
    );
    let wide = |x: T| {
        if x.dsize < dsize && x.elems == elems {
            elems * dsize
        } else {
            0
        }
    };
    g.mark_product(v, [wide(a), wide(b)]);
    T { v, elems, dsize }
}

/// `a + b` (broadcasting, promoting to the wider dtype): saves nothing, and
/// its backward hands the incoming gradient to each operand of the same
/// size ([`Graph::mark_addition`]).
pub fn add(g: &mut Graph, a: T, b: T, name: &'static str) -> T {
    let (elems, dsize) = broadcast(a, b);
    let v = g.op(
        name,
        &[a.v, b.v],
        elems * dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    g.mark_addition(v);
    T { v, elems, dsize }
}

/// `torch.tanh`: a new tensor of `x`'s shape and dtype, saved for
/// backward (its gradient is `1 - tanh^2`).
pub fn tanh(g: &mut Graph, x: T, name: &'static str) -> T {
    let v = g.op(
        name,
        &[x.v],
        x.bytes(),
        Component::Transient,
        Saves::output(),
    );
    T { v, ..x }
}

/// An elementwise op on `x` whose gradient needs none of its tensors (a
/// scale by a constant, a `masked_fill`, a copy), with an output of
/// `out_dsize` bytes per element.
pub fn unary(g: &mut Graph, x: T, name: &'static str, out_dsize: u64) -> T {
    unary_keeping(g, x, name, Saves::NOTHING, out_dsize)
}

/// An elementwise op on `x` whose backward keeps `x` (an activation, `pow`,
/// `erf`), with an output of `out_dsize` bytes per element.
pub fn unary_saving_input(g: &mut Graph, x: T, name: &'static str, out_dsize: u64) -> T {
    unary_keeping(g, x, name, Saves::inputs(&[x.v]), out_dsize)
}

fn unary_keeping(g: &mut Graph, x: T, name: &'static str, saves: Saves, out_dsize: u64) -> T {
    let v = g.op(
        name,
        &[x.v],
        x.elems * out_dsize,
        Component::Transient,
        saves,
    );
    T {
        v,
        elems: x.elems,
        dsize: out_dsize,
    }
}

/// `F.dropout` in training with p > 0: output plus a saved bool mask.
pub fn dropout(g: &mut Graph, x: T, name: &'static str) -> T {
    let v = g.op(
        name,
        &[x.v],
        x.bytes(),
        Component::Transient,
        Saves::NOTHING.and_buffer_before_output(x.elems),
    );
    T {
        v,
        elems: x.elems,
        dsize: x.dsize,
    }
}
