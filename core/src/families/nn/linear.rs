//! Linear maps: `F.linear` with autocast, quantised weights and LoRA, the
//! bias gradient's reduction buffer, and the embedding gradient's scratch.

use super::{autocast_weight, cast, unary, Ctx, BF16, FP32, T};
use crate::component::Component;
use crate::graph::{GradOrder, Graph, Saves, Value};

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
    /// Weights stored quantised by bitsandbytes (int8/int4).
    pub quantized: Option<super::bnb::Scheme>,
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

/// [`linear`] run by `kernel`.
pub fn linear_by(
    g: &mut Graph,
    cx: &mut Ctx,
    x: T,
    l: &Linear,
    name: &'static str,
    kernel: Kernel,
) -> T {
    if l.quantized.is_some() {
        let out = super::bnb::linear(g, cx, x, l, name);
        return match l.lora {
            None => out,
            Some((a, b, rank)) => {
                // peft's `lora.Linear4bit` clones the base output first
                // ("defensively", before adding the adapters' delta).
                let cloned = if matches!(l.quantized, Some(super::bnb::Scheme::FourBit { .. })) {
                    let c = unary(g, out, "lora: base output cloned", out.dsize);
                    g.mark_view_grads(c.v);
                    g.drop(out.v);
                    c
                } else {
                    out
                };
                lora_branch(g, cx, x, l, cloned, a, b, rank)
            }
        };
    }
    let rows = x.elems / l.in_features;
    let w_elems = l.in_features * l.out_features;
    let mut drop_weight_copy = false;
    let mut bias = l.bias;
    let mut drop_bias_copy = false;
    let (xin, w) = if cx.autocast {
        // Autocast casts `F.linear(input, weight, bias)`'s arguments in the
        // order the compiler evaluates them, right to left under GCC: the
        // bias, the weight, then the input (the H200 trace of BERT's
        // projections, `measurements/small-pool/`: 1,536 B, 1,179,648
        // B, then the input). Bias and weight copies are cached alike.
        if let Some(b) = l.bias {
            let (copy, uncached) = autocast_weight(g, cx, b, l.out_features, l.weight_dsize);
            bias = Some(copy.v);
            drop_bias_copy = uncached;
        }
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
    // The copy is `matmul`'s temporary and what it saves; the tensor it
    // was copied from (autocast's cast) lives until the call returns (the
    // H200 trace of ViT-B/16 amp training, `trace-segments-32.jsonl.gz`,
    // events 11 to 15: the cast, the copy, `in_proj`'s output and the
    // cuBLAS workspace, then the cast freed).
    let (xin, copied_from) = if kernel == Kernel::GemmOfTransposedInput {
        let c = unary(g, xin, "reshape: contiguous copy of the input", xin.dsize);
        // Its backward hands the gradient on as a view (a clone's and a
        // reshape's): the next block is the input cast's (trace 32,
        // event 440: the 73.88 MiB fp32 gradient of autocast's cast).
        g.mark_view_grads(c.v);
        (c, Some(xin.v))
    } else {
        (xin, None)
    };
    let out_dsize = if cx.autocast { BF16 } else { cx.compute_dsize };
    // The input is saved for the weight's gradient, the weight for the
    // input's (in that order).
    // A convolution's node saves both whatever needs a gradient: one
    // `convolution_backward` formula reads both (ViT's `conv_proj`, whose
    // images need none, keeps its weight's autocast cast through backward
    // in the H200 trace of amp training, `trace-segments-32.jsonl.gz`).
    let (mut weight_needs, mut input_needs) = (g.requires_grad(w.v), g.requires_grad(xin.v));
    if kernel == Kernel::Convolution {
        weight_needs |= input_needs;
        input_needs = weight_needs;
    }
    let (saved_buf, saved_len) = match (weight_needs, input_needs) {
        (true, true) => ([xin.v, w.v], 2),
        (true, false) => ([xin.v, xin.v], 1),
        (false, true) => ([w.v, w.v], 1),
        (false, false) => ([xin.v, w.v], 0),
    };
    let saved = &saved_buf[..saved_len];
    let inputs_buf = [xin.v, w.v, bias.unwrap_or(w.v)];
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
    // `addmm` for a 2-D or contiguous input with bias; otherwise `mm`
    // (the bias, if any, added apart).
    let addmm = l.bias.is_some() && !reduction_first;
    if kernel != Kernel::Convolution {
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
    // output exists; its first `addmm` of more than one row goes through
    // cuBLASLt's bias epilogue, which creates the cuBLASLt workspace next.
    if kernel != Kernel::Convolution {
        if addmm && rows > 1 {
            g.lt_gemm();
        } else {
            g.gemm();
        }
    }
    g.drop(xin.v);
    if let Some(original) = copied_from {
        g.drop(original);
    }
    if drop_weight_copy {
        g.drop(w.v);
    }
    if let (true, Some(copy)) = (drop_bias_copy, bias) {
        g.drop(copy);
    }
    let out = T {
        v,
        elems: rows * l.out_features,
        dsize: out_dsize,
    };
    match l.lora {
        None => out,
        Some((a, b, rank)) => lora_branch(g, cx, x, l, out, a, b, rank),
    }
}

/// peft's LoRA branch, `lora_B(lora_A(x.to(float32))) * scaling` added
/// to the base output `out`, in fp32 and cast back to the output's dtype.
/// Under `torch.autocast(bfloat16)` on a bf16 base ([`Ctx::lora_autocast`])
/// the fp32 cast of the input lives only until `lora_A`, whose autocast
/// takes (and autograd saves) a bf16 copy of it, half the bytes; the
/// adapters' weights get cached bf16 copies and every output is bf16 (the
/// Trainer's LoRA job on the H200, `measurements/real-jobs/`: 2 adapters x
/// 16 layers x 16 MiB less saved).
#[allow(clippy::too_many_arguments)]
fn lora_branch(
    g: &mut Graph,
    cx: &mut Ctx,
    x: T,
    l: &Linear,
    out: T,
    a: Value,
    b: Value,
    rank: u64,
) -> T {
    let rows = x.elems / l.in_features;
    let autocast = cx.lora_autocast;
    let dsize = if autocast { BF16 } else { FP32 };
    let x32 = cast(g, x, FP32, "lora: input cast to fp32");
    // An adapter's weight as its matmul reads it: autocast's cached bf16
    // copy (and whether the caller drops it), or the fp32 parameter.
    let weight = |g: &mut Graph, cx: &mut Ctx, w: Value, elems: u64| {
        if autocast {
            let (copy, uncached) = autocast_weight(g, cx, w, elems, FP32);
            (copy.v, uncached)
        } else {
            (w, false)
        }
    };
    let (wa, drop_wa) = weight(g, cx, a, rank * l.in_features);
    // `x = self._cast_input_dtype(x, lora_A.weight.dtype)` rebinds the
    // forward's `x`: the fp32 copy is a local until the forward returns
    // (kept anyway when autograd saves it). Under autocast `lora_A` reads
    // a bf16 cast of it, a temporary of the call. The H200 trace of a
    // checkpointed LoRA job, whose no-grad forward saves nothing
    // (`measurements/h200-generalization/trace-segments-27b.jsonl.gz`,
    // events 12 to 20): the 128 MiB fp32 input lives through `lora_B`, the
    // scaling, the sum and its cast back.
    // `lora_A(dropout(x))`: with `lora_dropout` above 0 the dropout's
    // output (and its saved mask) is what `lora_A` reads; the output is a
    // temporary of the expression.
    let dropped = if cx.lora_dropout {
        super::dropout(g, x32, "lora_dropout")
    } else {
        x32
    };
    let input = if autocast {
        cast(g, dropped, BF16, "lora_A: autocast input cast to bf16")
    } else {
        dropped
    };
    let ha = g.op(
        "lora_A",
        &[input.v, wa],
        rows * rank * dsize,
        Component::Transient,
        Saves::inputs(&[input.v, wa]),
    );
    g.mark_gemm(ha, GradOrder::WeightFirst);
    if input.v != x32.v {
        g.drop(input.v);
    }
    if dropped.v != x32.v && dropped.v != input.v {
        g.drop(dropped.v);
    }
    if drop_wa {
        g.drop(wa);
    }
    let (wb, drop_wb) = weight(g, cx, b, l.out_features * rank);
    let hb = g.op(
        "lora_B",
        &[ha, wb],
        rows * l.out_features * dsize,
        Component::Transient,
        Saves::inputs(&[ha, wb]),
    );
    g.mark_gemm(hb, GradOrder::WeightFirst);
    g.drop(ha);
    if drop_wb {
        g.drop(wb);
    }
    let scaled = g.op(
        "lora scaling",
        &[hb],
        rows * l.out_features * dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    g.drop(hb);
    // bf16 + bf16 under autocast; a bf16 output plus the fp32 delta is fp32.
    let sum_dsize = if autocast { out.dsize } else { FP32 };
    let sum = g.op(
        "lora: result + delta",
        &[out.v, scaled],
        rows * l.out_features * sum_dsize,
        Component::Transient,
        Saves::NOTHING,
    );
    // Its backward hands the delta the incoming gradient as is and the
    // base output a cast of it (the H200 trace of Gemma-2-9B eager LoRA,
    // `measurements/h200-generalization/trace-segments-30.jsonl.gz`,
    // events 5,741 to 5,745: a 32 MiB bf16 cast, then the scaling's 64 MiB
    // gradient).
    g.mark_addition(sum);
    // The expression's temporary goes first, then the rebound `result`.
    g.drop_all(&[scaled, out.v]);
    let sum = T {
        v: sum,
        elems: out.elems,
        dsize: sum_dsize,
    };
    let back = cast(g, sum, out.dsize, "lora: result cast back");
    g.drop(sum.v);
    g.drop(x32.v);
    back
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
