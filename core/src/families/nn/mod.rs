//! Building blocks shared by the families: PyTorch ops with their
//! allocations, the tensors autograd saves, and autocast's dtype rules.

use crate::component::Component;
use crate::graph::{GradOrder, Graph, Saves, Value};
use alloc::vec::Vec;

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

/// Bytes of bf16 / fp16 / fp32 and int64 elements.
pub const BF16: u64 = 2;
/// fp32 element size.
pub const FP32: u64 = 4;
/// int64 element size (token ids, labels, pooling indices).
pub const INT64: u64 = 8;

/// A linear layer's parameters.
#[derive(Clone, Copy, Debug)]
pub struct Linear {
    /// Weight (out x in).
    pub weight: Value,
    /// Weight element size as stored (0.5-ish for int4 is handled by `quantized`).
    pub weight_dsize: u64,
    /// Bias.
    pub bias: Option<Value>,
    /// Input features.
    pub in_features: u64,
    /// Output features.
    pub out_features: u64,
    /// LoRA adapters (A: r x in, B: out x r, fp32) and rank.
    pub lora: Option<(Value, Value, u64)>,
    /// Weights stored quantised (int8/int4): dequantised per call.
    pub quantized: bool,
}

/// Element size of the parameters: the training precision's (fp32 master
/// weights under `amp_bf16` and `fp32`, bf16 for `bf16`), else the
/// inference dtype (quantised dtypes keep bf16 for what they do not quantise).
pub fn param_dsize(workload: &crate::workload::Workload) -> u64 {
    use crate::workload::{Mode, Precision};
    if workload.mode == Mode::Training {
        match workload.training.precision {
            Precision::AmpBf16 | Precision::Fp32 => FP32,
            Precision::Bf16 => BF16,
        }
    } else if workload.dtype.is_float() {
        workload.dtype.bytes()
    } else {
        BF16
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
            quantized: false,
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
    /// `torch.autocast(bfloat16)` is active: matmuls run in bf16 on cast copies.
    pub autocast: bool,
    /// Element size of matmul outputs without autocast (weights' dtype).
    pub compute_dsize: u64,
    /// Autocast's cache of bf16 weight copies: (weight, copy).
    pub cast_cache: Vec<(Value, T)>,
    /// Cache weight casts (off inside checkpointed segments, where the
    /// H200 snapshot shows no per-layer weight copies outliving the layer).
    pub cache_weight_casts: bool,
    /// The 2-byte activations are IEEE fp16 rather than bf16 (fp16
    /// inference), which some kernels treat differently.
    pub fp16: bool,
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
        }
    }

    /// The context of a training precision: autocast for `amp_bf16`, plain
    /// fp32 or bf16 otherwise.
    pub fn for_precision(precision: crate::workload::Precision) -> Ctx {
        match precision {
            crate::workload::Precision::AmpBf16 => Ctx::amp(),
            crate::workload::Precision::Fp32 => Ctx::plain(FP32),
            crate::workload::Precision::Bf16 => Ctx::plain(BF16),
        }
    }

    /// An autocast(bf16) context over fp32 weights.
    pub fn amp() -> Ctx {
        Ctx {
            autocast: true,
            compute_dsize: BF16,
            cast_cache: Vec::new(),
            cache_weight_casts: true,
            fp16: false,
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

/// `F.linear(x, W, b)` over the last dimension, with autocast, quantised
/// weights and LoRA (peft: `result + B(A(x.to(fp32))) * scaling`, then
/// `.to(result dtype)`).
pub fn linear(g: &mut Graph, cx: &mut Ctx, x: T, l: &Linear, name: &'static str) -> T {
    linear_by(g, cx, x, l, name, Kernel::Gemm)
}

/// How a linear map runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// cuBLAS GEMM (`F.linear`).
    Gemm,
    /// cuBLAS GEMM on a non-contiguous input (nn.MultiheadAttention's
    /// batch-first transpose): the input is first copied contiguous, and
    /// the copy is what the weight gradient saves.
    GemmOfTransposedInput,
    /// cuDNN convolution (a patch convolution written as a linear map): no
    /// cuBLAS handle is made.
    Convolution,
}

/// Bytes of the global-memory buffer PyTorch's reduction kernel takes to
/// sum a contiguous `rows x cols` tensor over its rows into `cols` outputs
/// (a bias gradient, `grad.sum(0)`), as `setReduceConfig` and
/// `gpu_reduce_kernel` in `ATen/native/cuda/Reduce.cuh` (torch 2.11) size
/// it: blocks of 32 output lanes (each loading `vec` outputs) by 4 warps
/// over the rows, and, once each thread would sum at least 256 values, the
/// rows split over `ctas` blocks per output column so that the grid fills
/// every multiprocessor (`multiprocessors`: count and resident threads
/// each), the partial sums staged in an fp32 buffer of
/// `4 * cols * ctas * 32 * vec` bytes. 0 when no split happens. Measured on
/// the H200 for 4,096 to 32,768 rows and 768 to 4,096 columns, bias-less
/// linears showing none (`measurements/h200-linear-backward/`): ViT-B/16
/// at batch 64 takes 132 MiB for `fc1` and 132.75 MiB for `in_proj`.
pub fn column_sum_buffer(rows: u64, cols: u64, dsize: u64, multiprocessors: (u32, u32)) -> u64 {
    const MAX_THREADS: u64 = 512;
    const WARP: u64 = 32;
    const MIN_VALUES_PER_THREAD: u64 = 16;
    const MAX_VALUES_PER_THREAD: u64 = 256;
    if rows < 2 || cols < 2 {
        return 0;
    }
    // Tensors addressed beyond 32-bit byte offsets are reduced in pieces
    // (`with_32bit_indexing` halves the largest dimension), one at a time.
    let mut rows = rows;
    while rows > 1 && rows * cols * dsize.max(1) > i32::MAX as u64 {
        rows = rows.div_ceil(2);
    }
    let last_pow2 = |n: u64| {
        if n == 0 {
            1
        } else {
            1u64 << (63 - n.leading_zeros())
        }
    };
    // "Vectorize along output": the widest of 4, 2, 1 dividing the row.
    let vec = [4, 2, 1]
        .into_iter()
        .find(|&v| cols.is_multiple_of(v))
        .unwrap_or(1);
    let max_threads = MAX_THREADS / vec;
    let (dim0, dim1) = (cols / vec, rows);
    let dim0_pow2 = if dim0 < max_threads {
        last_pow2(dim0)
    } else {
        max_threads
    };
    let dim1_pow2 = if dim1 < max_threads {
        last_pow2(dim1)
    } else {
        max_threads
    };
    let block_height = dim1_pow2.min(max_threads / dim0_pow2.min(WARP));
    let block_width = dim0_pow2.min(max_threads / block_height);
    // Output lanes across the block's width; rows across its warps once each
    // thread would otherwise sum at least this many values.
    let step_output = block_width;
    if rows < (block_height * 16).min(MAX_VALUES_PER_THREAD) {
        return 0;
    }
    let values_per_thread = rows.div_ceil(block_height);
    let (sms, threads_per_sm) = (u64::from(multiprocessors.0), u64::from(multiprocessors.1));
    let target_grid = sms * (threads_per_sm / (block_width * block_height));
    let grid = (cols / vec).div_ceil(step_output);
    if values_per_thread < MAX_VALUES_PER_THREAD || grid > target_grid {
        return 0;
    }
    let ctas = target_grid
        .div_ceil(grid)
        .min(values_per_thread.div_ceil(MIN_VALUES_PER_THREAD))
        .max(values_per_thread.div_ceil(MAX_VALUES_PER_THREAD));
    if ctas <= 1 {
        return 0;
    }
    FP32 * cols * ctas * block_width * vec
}

/// [`linear`] run by `kernel`.
pub fn linear_by(
    g: &mut Graph,
    cx: &mut Ctx,
    x: T,
    l: &Linear,
    name: &'static str,
    kernel: Kernel,
) -> T {
    let rows = x.elems / l.in_features;
    let w_elems = l.in_features * l.out_features;
    let mut drop_weight_copy = false;
    let (xin, w) = if cx.autocast {
        // Autocast casts `F.linear(input, weight, bias)`'s arguments in the
        // order the compiler evaluates them, right to left under GCC: the
        // weight before the input (the H200 trace of BERT's projections).
        let (w, uncached) = autocast_weight(g, cx, l.weight, w_elems, l.weight_dsize);
        let xin = cast(g, x, BF16, "autocast: input cast to bf16");
        drop_weight_copy = uncached;
        (xin, w)
    } else {
        g.hold(x.v);
        let w = T {
            v: l.weight,
            elems: w_elems,
            dsize: l.weight_dsize,
        };
        (x, w)
    };
    let xin = if kernel == Kernel::GemmOfTransposedInput {
        let c = unary(g, xin, "reshape: contiguous copy of the input", xin.dsize);
        g.drop(xin.v);
        c
    } else {
        xin
    };
    let out_dsize = if cx.autocast { BF16 } else { cx.compute_dsize };
    if l.quantized {
        // bitsandbytes dequantises the weight to the compute dtype per call.
        g.workspace("dequantize weight", w_elems * out_dsize);
    }
    // The input is saved for the weight's gradient, the weight for the
    // input's (in that order).
    let (saved_buf, saved_len) = match (g.requires_grad(w.v), g.requires_grad(xin.v)) {
        (true, true) => ([xin.v, w.v], 2),
        (true, false) => ([xin.v, xin.v], 1),
        (false, true) => ([w.v, w.v], 1),
        (false, false) => ([xin.v, w.v], 0),
    };
    let saved = &saved_buf[..saved_len];
    let inputs_buf = [xin.v, w.v, l.bias.unwrap_or(w.v)];
    let inputs = &inputs_buf[..if l.bias.is_some() { 3 } else { 2 }];
    // The bias gradient is `grad.sum(0)`, a reduction whose kernel takes a
    // global-memory buffer: after the weight gradient for `addmm`, before
    // both gradients for `matmul + bias` (the transposed-input path).
    let bias_reduction = match l.bias {
        Some(b) if g.requires_grad(b) => {
            column_sum_buffer(rows, l.out_features, out_dsize, g.multiprocessors)
        }
        _ => 0,
    };
    let reduction_first = kernel == Kernel::GemmOfTransposedInput;
    let workspace = if reduction_first { bias_reduction } else { 0 };
    let v = g.op(
        name,
        inputs,
        rows * l.out_features * out_dsize,
        Component::Transient,
        Saves::inputs(saved).with_backward_workspace(workspace),
    );
    if !reduction_first && bias_reduction > 0 {
        g.set_backward_scratch(v, [bias_reduction, 0]);
    }
    if kernel != Kernel::Convolution {
        // `addmm` for a 2-D or contiguous input with bias; otherwise `mm`
        // (the bias, if any, added apart).
        let addmm = l.bias.is_some() && !reduction_first;
        g.mark_gemm(
            v,
            if addmm {
                GradOrder::InputFirst
            } else {
                GradOrder::WeightFirst
            },
        );
    }
    // A fresh process's first GEMM creates the cuBLAS workspace, after the
    // output exists.
    if kernel != Kernel::Convolution {
        g.gemm();
    }
    g.drop(xin.v);
    if drop_weight_copy {
        g.drop(w.v);
    }
    let out = T {
        v,
        elems: rows * l.out_features,
        dsize: out_dsize,
    };
    match l.lora {
        None => out,
        Some((a, b, rank)) => {
            let x32 = cast(g, x, FP32, "lora: input cast to fp32");
            let ha = g.op(
                "lora_A",
                &[x32.v, a],
                rows * rank * FP32,
                Component::Transient,
                Saves::inputs(&[x32.v]),
            );
            g.mark_gemm(ha, GradOrder::WeightFirst);
            g.drop(x32.v);
            let hb = g.op(
                "lora_B",
                &[ha, b],
                rows * l.out_features * FP32,
                Component::Transient,
                Saves::inputs(&[ha]),
            );
            g.mark_gemm(hb, GradOrder::WeightFirst);
            g.drop(ha);
            let scaled = g.op(
                "lora scaling",
                &[hb],
                rows * l.out_features * FP32,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(hb);
            let sum = g.op(
                "lora: result + delta",
                &[out.v, scaled],
                rows * l.out_features * FP32,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop_all(&[out.v, scaled]);
            let back = cast(
                g,
                T {
                    v: sum,
                    elems: out.elems,
                    dsize: FP32,
                },
                out.dsize,
                "lora: result cast back",
            );
            g.drop(sum);
            back
        }
    }
}

/// The shape and dtype of an elementwise op on `a` and `b`: the larger
/// operand's elements (broadcasting) in the wider dtype.
fn broadcast(a: T, b: T) -> (u64, u64) {
    (a.elems.max(b.elems), a.dsize.max(b.dsize))
}

/// `a * b` (broadcasting, promoting to the wider dtype): autograd keeps
/// each operand for the other's gradient (`a` when `b` needs one, `b`
/// when `a` does).
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

/// HF's RMSNorm: `w * (x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).to(x.dtype)`.
pub fn rms_norm(
    g: &mut Graph,
    x: T,
    weight: Value,
    weight_dsize: u64,
    hidden: u64,
    name: &'static str,
) -> T {
    let rows = x.elems / hidden;
    let x32 = cast(g, x, FP32, name);
    let p = unary_saving_input(g, x32, name, FP32);
    let var = g.op(
        name,
        &[p.v],
        rows * FP32,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(p.v);
    let rs = g.op(
        name,
        &[var],
        rows * FP32,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(var);
    let rs = T {
        v: rs,
        elems: rows,
        dsize: FP32,
    };
    let n = mul(g, x32, rs, name);
    g.drop_all(&[rs.v, x32.v]);
    let c = cast(g, n, x.dsize, name);
    let w = T {
        v: weight,
        elems: hidden,
        dsize: weight_dsize,
    };
    // `return self.weight * hidden_states.to(input_dtype)`: the fp32
    // `hidden_states` is a local until the return, after the product.
    let out = mul(g, w, c, name);
    g.drop(c.v);
    g.drop(n.v);
    out
}

/// `F.layer_norm`: output in the input dtype (fp32 under autocast); saves
/// input, weight and the per-row mean and rstd (fp32).
pub fn layer_norm(
    g: &mut Graph,
    cx: &Ctx,
    x: T,
    weight: Value,
    hidden: u64,
    name: &'static str,
) -> T {
    let rows = x.elems / hidden;
    let xin = if cx.autocast {
        cast(g, x, FP32, "autocast: cast to fp32")
    } else {
        g.hold(x.v);
        x
    };
    let v = g.op(
        name,
        &[xin.v, weight],
        xin.elems * xin.dsize,
        Component::Transient,
        Saves::inputs(&[xin.v, weight]).and_buffer(2 * rows * FP32),
    );
    g.drop(xin.v);
    T {
        v,
        elems: x.elems,
        dsize: xin.dsize,
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

/// `embedding_dense_backward` on CUDA with more than 3072 indices sorts
/// them and sums the gradient rows per partial segment into an fp32 buffer
/// of `indices / 10 + min(indices, rows)` rows, allocated after the weight
/// gradient and freed with the kernel (the H200 trace of BERT fp32
/// training: 27,681,792 B = 9,011 x 768 x 4 for 8,192 tokens). Up to 3072
/// indices a direct kernel takes nothing.
pub fn embedding_backward_scratch(g: &mut Graph, output: Value, indices: u64, rows: u64, dim: u64) {
    const NROWS_PER_THREAD: u64 = 10;
    if indices > 3072 {
        let partial_segments = indices / NROWS_PER_THREAD + indices.min(rows);
        g.set_backward_scratch(output, [partial_segments * dim * FP32, 0]);
    }
}

/// Attention shapes.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    /// Batch.
    pub batch: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads.
    pub kv_heads: u64,
    /// Query length.
    pub q_len: u64,
    /// Key length.
    pub kv_len: u64,
    /// Head width.
    pub head_dim: u64,
}

/// `scaled_dot_product_attention` (flash / memory-efficient kernels).
///
/// Measured on the H200: in inference the kernel allocates only its
/// output, already in (b, s, heads, hd) layout, so HF's
/// `transpose(1, 2).contiguous()` is free (llama-3.1-8b generate trace,
/// `measurements/h200-segments`). Under autocast, fp32 inputs are cast to
/// bf16 first and the casts are what backward keeps (llama-3.2-1b amp
/// training snapshot: six blocks per layer at `sdpa_attention_forward`).
/// In grad mode the kernel also saves an fp32 logsumexp and its output (in
/// HF models the next projection saves that storage too; in torchvision's
/// fp32 ViT training a `contiguous()` copy goes to `out_proj` and the
/// kernel's output stays with the kernel: 24 blocks per 12 layers at
/// `multi_head_attention_forward` in `trace-snapshots-6.md`). Its backward
/// allocates the input gradients, then its fp32 accumulator (the
/// memory-efficient kernel in fp32 first takes `grad_out * out` for the row
/// sums, and per-(batch, head) counters with the accumulator).
pub fn sdpa(g: &mut Graph, cx: &Ctx, q: T, k: T, v: T, s: AttnShape) -> T {
    let (q, k, v) = if cx.autocast {
        // sdpa is on autocast's bf16 list: fp32 inputs are cast (and saved).
        let q = cast(g, q, BF16, "attention (sdpa): autocast cast of query");
        let k = cast(g, k, BF16, "attention (sdpa): autocast cast of key");
        let v = cast(g, v, BF16, "attention (sdpa): autocast cast of value");
        (q, k, v)
    } else {
        g.hold(q.v);
        g.hold(k.v);
        g.hold(v.v);
        (q, k, v)
    };
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let lse = s.batch * s.heads * s.q_len * FP32;
    let out = g.op(
        "attention (sdpa)",
        &[q.v, k.v, v.v],
        out_elems * q.dsize,
        Component::Transient,
        Saves::inputs(&[q.v, k.v, v.v]).and_output().and_buffer(lse),
    );
    // Backward allocates the input gradients first, then (fp32, the
    // memory-efficient kernel) `grad_out * out` for the row sums, then its
    // fp32 accumulator (the H200 trace of BERT fp32 training: three 24 MiB
    // gradients, a 24 MiB product, then a 24.02 MiB workspace).
    let (product, counters) = if q.dsize == FP32 {
        (out_elems * FP32, s.batch * s.heads * 128)
    } else {
        (0, 0)
    };
    g.set_backward_scratch(out, [product, out_elems * FP32 + counters]);
    g.drop_all(&[q.v, k.v, v.v]);
    T {
        v: out,
        elems: out_elems,
        dsize: q.dsize,
    }
}

/// `scaled_dot_product_attention` on PyTorch's math backend: what fp32
/// inputs with grouped-query heads (`enable_gqa=True`) fall back to, since
/// flash and cuDNN attention take only half precision and the
/// memory-efficient kernel no grouped heads (`sdp_utils.cpp`). As
/// `_scaled_dot_product_attention_math` composes it: the query scaled by
/// the square root of the scale, a causal mask (bool `tril`, then a float
/// copy), keys and values `repeat_interleave`d to every head, the keys
/// transposed and scaled, `q @ k^T`, the mask added in place,
/// `_safe_softmax` (with a bool row mask), `probs @ v`; its locals live
/// until it returns (the transposed scaled keys and `matmul`'s contiguous
/// copy of them only through the first product). The
/// output comes in (b, heads, s, hd) layout, so the caller's
/// `transpose(1, 2).contiguous()` copies it. Llama-3.2-1B fp32 training b2
/// L1024 on the H200 allocates 4.6 GB more than the efficient kernel would
/// (`measurements/h200-generalization/`).
pub fn sdpa_math(g: &mut Graph, q: T, k: T, v: T, s: AttnShape) -> T {
    let ds = q.dsize;
    let score_elems = s.batch * s.heads * s.q_len * s.kv_len;
    let kv_elems = s.batch * s.heads * s.kv_len * s.head_dim;
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let scaled_q = g.op(
        "attention (sdpa math): query * sqrt(scale)",
        &[q.v],
        q.bytes(),
        Component::Transient,
        Saves::NOTHING,
    );
    let mask = (s.q_len > 1).then(|| {
        let tril = g.input(s.q_len * s.kv_len, Component::Transient);
        let float = g.input(s.q_len * s.kv_len * ds, Component::Transient);
        g.drop(tril);
        float
    });
    let expand = |g: &mut Graph, x: T, name| {
        if s.heads > s.kv_heads {
            g.op(
                name,
                &[x.v],
                kv_elems * ds,
                Component::Transient,
                Saves::NOTHING,
            )
        } else {
            g.hold(x.v);
            x.v
        }
    };
    let keys = expand(g, k, "attention (sdpa math): repeat_interleave(key)");
    let values = expand(g, v, "attention (sdpa math): repeat_interleave(value)");
    let scaled_k = g.op(
        "attention (sdpa math): key^T * sqrt(scale)",
        &[keys],
        kv_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    // The scaled keys keep the transposed layout: `matmul` copies them
    // contiguous for its batched GEMM, and both go when it returns (the
    // scaled keys stay only if autograd saved them).
    let operand = g.op(
        "attention (sdpa math): contiguous key operand",
        &[scaled_k],
        kv_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    let scores = g.op(
        "attention (sdpa math): query @ key^T",
        &[scaled_q, scaled_k],
        score_elems * ds,
        Component::Transient,
        Saves::inputs(&[scaled_q, scaled_k]),
    );
    g.drop_all(&[operand, scaled_k]);
    let probs = g.op(
        "attention (sdpa math): softmax",
        &[scores],
        score_elems * ds,
        Component::Transient,
        Saves::output(),
    );
    // Its backward takes a scores-sized temporary once the gradient is
    // allocated (three scores-sized blocks per layer backward in the H200
    // trace of Llama-3.2-1B fp32 training, `trace-segments-5.jsonl`).
    g.set_backward_scratch(probs, [score_elems * ds, 0]);
    // `_safe_softmax` zeroes fully masked rows through a bool mask of the
    // scores' shape.
    g.workspace("attention (sdpa math): softmax row mask", score_elems);
    g.drop(scores);
    let out = g.op(
        "attention (sdpa math): probs @ value",
        &[probs, values],
        out_elems * ds,
        Component::Transient,
        Saves::inputs(&[probs, values]),
    );
    g.drop_all(&[scaled_q, probs, keys, values]);
    if let Some(m) = mask {
        g.drop(m);
    }
    let t = g.op(
        "attention output transpose",
        &[out],
        out_elems * ds,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(out);
    T {
        v: t,
        elems: out_elems,
        dsize: ds,
    }
}

/// How a model's eager attention turns scores into probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerSoftmax {
    /// The softmax runs on an fp32 copy of the scores: `softmax(...,
    /// dtype=torch.float32)` (Llama, Mistral, Qwen2, the encoders), or a
    /// plain `softmax` under autocast, which runs it in fp32 (GPT-2 amp).
    pub fp32: bool,
    /// `dropout(attn_weights, p)` in training after the cast back to the
    /// values' dtype (GPT-2's `attn_pdrop`): its output and bool mask are
    /// kept for backward, and it is the tensor the caller holds.
    pub dropout: bool,
    /// BERT and ESM: no cast back to the values' dtype; the dropout (if
    /// any) runs on the softmax output and autocast casts the result for
    /// the product, which saves the cast.
    pub dropout_before_cast: bool,
    /// The scores are IEEE fp16 (not bf16): an fp32 softmax reads them
    /// without a converted copy.
    pub half_to_float: bool,
}

/// Eager attention: `softmax(QK^T * scale + mask, dtype=fp32).to(q.dtype) @ V`
/// with `repeat_kv` copies for grouped-query attention (GPT-2: the softmax
/// in the scores' dtype unless autocast runs it in fp32, then dropout on
/// the probabilities in training; see [`EagerSoftmax`]).
///
/// The attention probabilities are returned too (`attn_weights`): the
/// caller's `hidden_states, _ = self.self_attn(...)` keeps them until its
/// forward returns (seen in the H200 snapshot: 512 MiB alive through the
/// MLP); drop them there.
pub fn eager_attention(
    g: &mut Graph,
    q: T,
    k: T,
    v: T,
    s: AttnShape,
    mask: Option<T>,
    style: EagerSoftmax,
) -> (T, Value) {
    let groups = s.heads / s.kv_heads.max(1);
    let (kr, vr) = if groups > 1 {
        let kr = unary(
            g,
            T {
                elems: s.batch * s.heads * s.kv_len * s.head_dim,
                ..k
            },
            "repeat_kv",
            k.dsize,
        );
        let vr = unary(
            g,
            T {
                elems: s.batch * s.heads * s.kv_len * s.head_dim,
                ..v
            },
            "repeat_kv",
            v.dsize,
        );
        (kr, vr)
    } else {
        g.hold(k.v);
        g.hold(v.v);
        (k, v)
    };
    let score_elems = s.batch * s.heads * s.q_len * s.kv_len;
    // `torch.matmul` folds the batch and head dims into one for `bmm` with
    // `reshape`: the query (a transposed view of the projection) cannot be
    // viewed that way when batch > 1 and is copied (a q-sized temporary
    // around the scores' allocation in the H200 trace); with batch 1 the
    // fold is a view (no copy in the trace of Mistral-7B eager, b1 L8192,
    // `measurements/h200-generalization/trace-segments-5.jsonl`).
    let operand = (s.batch > 1).then(|| {
        g.op(
            "attention scores: matmul operand copy",
            &[q.v],
            q.bytes(),
            Component::Transient,
            Saves::NOTHING,
        )
    });
    let scores = g.op(
        "attention scores QK^T",
        &[q.v, kr.v],
        score_elems * q.dsize,
        Component::Transient,
        Saves::inputs(&[q.v, kr.v]),
    );
    if let Some(operand) = operand {
        g.drop(operand);
    }
    let scores = T {
        v: scores,
        elems: score_elems,
        dsize: q.dsize,
    };
    let scaled = unary(g, scores, "attention scores * scale", q.dsize);
    g.drop(scores.v);
    let masked = match mask {
        Some(m) => {
            let r = add(g, scaled, m, "attention scores + mask");
            g.drop(scaled.v);
            r
        }
        None => scaled,
    };
    // softmax(x, dtype=torch.float32) converts its input first, then
    // softmaxes the copy: masked scores, the fp32 copy and the fp32 output
    // are alive together (H200 snapshot of eager attention). On CUDA, fp16
    // scores skip the copy: `at::softmax` calls `_softmax(x,
    // half_to_float=True)`, which reads the half input and writes fp32
    // (Mistral-7B eager fp16 generation, b1 L8192: 8 GiB less than bf16).
    let sm_dsize = if style.fp32 { FP32 } else { masked.dsize };
    let up = if style.half_to_float && masked.dsize == 2 {
        g.hold(masked.v);
        masked
    } else {
        cast(g, masked, sm_dsize, "softmax: input to fp32")
    };
    let sm = g.op(
        "softmax",
        &[up.v],
        score_elems * sm_dsize,
        Component::Transient,
        Saves::output(),
    );
    g.drop(up.v);
    let sm = T {
        v: sm,
        elems: score_elems,
        dsize: sm_dsize,
    };
    // `softmax(...).to(q.dtype)` in one expression: the fp32 output goes
    // when `.to` returns, the masked scores when the name is rebound.
    // `probs` is what the caller keeps (the returned `attn_weights`),
    // `operand` what `probs @ V` multiplies.
    let (probs, operand) = if style.dropout_before_cast {
        // BERT: dropout on the softmax output, then autocast's cast of it
        // for the product (saved by the product, not returned).
        let d = if style.dropout {
            dropout(g, sm, "attention probs dropout")
        } else {
            cast(g, sm, sm.dsize, "attention probs")
        };
        g.drop_all(&[sm.v, masked.v]);
        (d, cast(g, d, q.dsize, "attention probs: autocast cast"))
    } else {
        let smc = cast(g, sm, q.dsize, "attention probs to q dtype");
        g.drop_all(&[sm.v, masked.v]);
        let smc = if style.dropout {
            let d = dropout(g, smc, "attention probs dropout");
            g.drop(smc.v);
            d
        } else {
            smc
        };
        g.hold(smc.v);
        (smc, smc)
    };
    let out_elems = s.batch * s.heads * s.q_len * s.head_dim;
    let out = g.op(
        "attention probs @ V",
        &[operand.v, vr.v],
        out_elems * q.dsize,
        Component::Transient,
        Saves::inputs(&[operand.v, vr.v]),
    );
    g.drop(operand.v);
    let t = g.op(
        "attention output transpose",
        &[out],
        out_elems * q.dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(out);
    // The repeated keys and values are locals of the function: freed on return.
    g.drop_all(&[kr.v, vr.v]);
    (
        T {
            v: t,
            elems: out_elems,
            dsize: q.dsize,
        },
        probs.v,
    )
}

/// The rotary tables of a forward call (`LlamaRotaryEmbedding` /
/// `EsmRotaryEmbedding.forward`, fp32 with autocast off): `freqs =
/// inv_freq @ positions`, `emb = cat(freqs, freqs)`, `cos = emb.cos() *
/// attention_scaling` (two tensors), the same for sin, then `.to(dtype)`;
/// the fp32 tensors live until the function returns (H200 allocation trace).
/// Returns (cos, sin) of `tokens x head_dim` in `dsize`, held by the caller.
pub fn rotary_tables(g: &mut Graph, tokens: u64, head_dim: u64, dsize: u64) -> (T, T) {
    g.at("rotary embedding cos/sin", None);
    let table = tokens * head_dim;
    let freqs = g.input(table / 2 * FP32, Component::Transient);
    // `inv_freq @ position_ids` is a batched matmul: in a fresh process
    // the model's first, which creates the cuBLAS workspace (the H200
    // traces: 32 MiB at `modeling_llama.py:122`, before any layer).
    g.gemm();
    let emb = g.input(table * FP32, Component::Transient);
    let mut scaled = [freqs; 2];
    for slot in &mut scaled {
        let raw = g.input(table * FP32, Component::Transient);
        *slot = g.input(table * FP32, Component::Transient);
        g.drop(raw);
    }
    let fp32 = |v| T {
        v,
        elems: table,
        dsize: FP32,
    };
    let cos = cast(g, fp32(scaled[0]), dsize, "rotary cos");
    let sin = cast(g, fp32(scaled[1]), dsize, "rotary sin");
    g.drop_all(&[scaled[0], scaled[1], freqs, emb]);
    (cos, sin)
}

/// Rotary embedding: `q * cos + rotate_half(q) * sin`, where `rotate_half`
/// is `cat(-x2, x1)`. `cos`/`sin` are shared (b, s, hd) tensors.
pub fn rotary(g: &mut Graph, x: T, cos: T, sin: T) -> T {
    let a = mul(g, x, cos, "rotary: x * cos");
    let rot = rotate_half(g, x);
    let b = mul(g, rot, sin, "rotary: rotate_half(x) * sin");
    g.drop(rot.v);
    let out = add(g, a, b, "rotary: sum");
    g.drop_all(&[a.v, b.v]);
    out
}

/// `rotate_half(x) = cat(-x2, x1)`: the negated half, then the
/// concatenation (the half freed once it is copied in). `x` is not dropped.
pub fn rotate_half(g: &mut Graph, x: T) -> T {
    let neg = g.op(
        "rotary: rotate_half",
        &[x.v],
        x.bytes() / 2,
        Component::Transient,
        Saves::NOTHING,
    );
    let rot = g.op(
        "rotary: rotate_half",
        &[neg, x.v],
        x.bytes(),
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(neg);
    T { v: rot, ..x }
}

/// `F.cross_entropy(logits, labels)` (torch's `CrossEntropyLoss`, as
/// classifiers and BERT's masked-LM head call it): `log_softmax` in the
/// logits' dtype, saving its output, then `nll_loss`, which autocast runs
/// in fp32 on a cast copy that it saves (the H200 trace of BERT amp
/// training: 238.5 MiB bf16 log-probabilities, then a 476.9 MiB fp32 copy
/// alive into backward). Returns the scalar loss; `logits` is not dropped.
pub fn cross_entropy(g: &mut Graph, autocast: bool, logits: T, rows: u64) -> Value {
    let labels = g.input(rows * INT64, Component::Transient);
    let lsm = g.op(
        "loss: log_softmax",
        &[logits.v],
        logits.bytes(),
        Component::Transient,
        Saves::output(),
    );
    let lsm = T { v: lsm, ..logits };
    let nll_input = if autocast && lsm.dsize != FP32 {
        let c = cast(g, lsm, FP32, "loss: nll_loss autocast cast to fp32");
        g.drop(lsm.v);
        c
    } else {
        lsm
    };
    // nll_loss saves its input (for its backward's shape and dtype).
    let loss = g.op(
        "loss: nll",
        &[nll_input.v],
        4,
        Component::Transient,
        Saves::inputs(&[nll_input.v, labels]),
    );
    g.drop_all(&[nll_input.v, labels]);
    loss
}

/// HF causal-LM loss over all tokens: `logits.float()`, then
/// `cross_entropy` (log_softmax saves its fp32 output). Returns the scalar
/// loss; `logits` is not dropped.
pub fn causal_lm_loss(g: &mut Graph, logits: T, rows: u64) -> T {
    let l32 = cast(g, logits, FP32, "loss: logits.float()");
    let labels = g.input(rows * INT64, Component::Transient);
    let lsm = g.op(
        "loss: log_softmax",
        &[l32.v],
        l32.elems * FP32,
        Component::Transient,
        Saves::output(),
    );
    let lsm = T {
        v: lsm,
        elems: l32.elems,
        dsize: FP32,
    };
    g.drop(l32.v);
    let loss = g.op(
        "loss: nll",
        &[lsm.v],
        4,
        Component::Transient,
        Saves::inputs(&[labels]),
    );
    g.drop_all(&[lsm.v, labels]);
    T {
        v: loss,
        elems: 1,
        dsize: FP32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: (u32, u32) = (132, 2048);

    /// Every buffer measured on the H200 (`measurements/h200-linear-backward/
    /// summary.txt`): (rows, out_features, bytes).
    #[test]
    fn column_sum_buffers_match_the_h200() {
        for (rows, cols, bytes) in [
            (4096, 3072, 100_663_296),
            (4096, 768, 25_165_824),
            (4096, 2304, 75_497_472),
            (4096, 4096, 134_217_728),
            (12608, 3072, 138_412_032),
            (12608, 768, 77_463_552),
            (12608, 2304, 139_198_464),
            (12608, 4096, 138_412_032),
            (32768, 3072, 138_412_032),
            (32768, 768, 138_412_032),
            (32768, 2304, 139_198_464),
            (32768, 4096, 138_412_032),
        ] {
            for dsize in [BF16, FP32] {
                assert_eq!(
                    column_sum_buffer(rows, cols, dsize, H200),
                    bytes,
                    "{rows} x {cols}"
                );
            }
        }
    }

    #[test]
    fn short_reductions_take_no_buffer() {
        // A classifier's bias over a batch of 64 rows: one block per column.
        assert_eq!(column_sum_buffer(64, 1000, FP32, H200), 0);
        assert_eq!(column_sum_buffer(1, 4096, FP32, H200), 0);
        assert_eq!(column_sum_buffer(4096, 1, FP32, H200), 0);
        assert_eq!(column_sum_buffer(0, 0, FP32, H200), 0);
    }

    #[test]
    fn fewer_multiprocessors_split_less() {
        let h200 = column_sum_buffer(12608, 3072, BF16, H200);
        let l4 = column_sum_buffer(12608, 3072, BF16, (58, 1536));
        assert!(l4 > 0 && l4 < h200, "{l4} vs {h200}");
    }
}
