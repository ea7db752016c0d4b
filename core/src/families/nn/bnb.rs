//! bitsandbytes' quantized linear layers (0.50), as its sources allocate
//! them: `Linear4bit` over `functional.quantize_4bit`'s storage and the
//! CUDA backend's `gemm_4bit` dispatch, and `MatMul4Bit`'s backward.

use super::{cast, Ctx, Linear, BF16, T};
use crate::arch::Dtype;
use crate::component::Component;
use crate::graph::{GradOrder, Graph, Saves};
use alloc::vec::Vec;

/// Values per absmax block of a 4-bit weight (`blocksize=64`, the default
/// of `BitsAndBytesConfig`).
pub const FOUR_BIT_BLOCK: u64 = 64;
/// Absmax values per block of the second quantization (`quantize_blockwise`'s
/// `blocksize=256` in `quantize_4bit` with `compress_statistics`).
pub const NESTED_BLOCK: u64 = 256;
/// Bytes of the 16-value NF4/FP4 code table each 4-bit weight holds
/// (`get_4bit_type(..., device)`: a new fp32 tensor per weight).
pub const FOUR_BIT_CODE_BYTES: u64 = 16 * 4;
/// Bytes of the 256-value dynamic code a nested state copies for each
/// weight (`code.to(device, copy=True)` in `quantize_blockwise`).
pub const DYNAMIC_CODE_BYTES: u64 = 256 * 4;
/// Bytes of the nested state's `offset` (`absmax.mean()`, an fp32 scalar).
pub const OFFSET_BYTES: u64 = 4;

/// How bitsandbytes stores a linear's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// `Linear4bit` (NF4 or FP4), its absmax quantized again when `nested`
    /// (`bnb_4bit_use_double_quant`).
    FourBit {
        /// Double quantization.
        nested: bool,
    },
    /// `Linear8bitLt` (LLM.int8): int8 rows and one fp32 scale per row.
    EightBit,
}

impl Scheme {
    /// The scheme of a weight dtype; `None` for the float formats.
    pub fn of(dtype: Dtype) -> Option<Scheme> {
        match dtype {
            Dtype::Int4 => Some(Scheme::FourBit { nested: false }),
            Dtype::Int4Dq => Some(Scheme::FourBit { nested: true }),
            Dtype::Int8 => Some(Scheme::EightBit),
            Dtype::Fp32 | Dtype::Fp16 | Dtype::Bf16 => None,
        }
    }

    /// The tensors a `rows x cols` weight leaves on the GPU once quantized,
    /// in the order bitsandbytes creates them: the packed weight first
    /// (what the layer's matmul reads), then its quantization state.
    pub fn stored_tensors(self, rows: u64, cols: u64) -> Vec<u64> {
        let elems = rows * cols;
        match self {
            Scheme::FourBit { nested } => {
                let blocks = elems.div_ceil(FOUR_BIT_BLOCK);
                let packed = elems.div_ceil(2);
                if nested {
                    // `quantize_4bit`: the packed weight and its fp32
                    // absmax, the NF4 code, `offset = absmax.mean()`, then
                    // `quantize_blockwise(absmax - offset)`: uint8 absmax,
                    // its fp32 absmax per 256, a copy of the dynamic code
                    // (the fp32 absmax and the difference are freed).
                    alloc::vec![
                        packed,
                        FOUR_BIT_CODE_BYTES,
                        OFFSET_BYTES,
                        blocks,
                        blocks.div_ceil(NESTED_BLOCK) * 4,
                        DYNAMIC_CODE_BYTES,
                    ]
                } else {
                    alloc::vec![packed, blocks * 4, FOUR_BIT_CODE_BYTES]
                }
            }
            // `Int8Params`: `CB` (int8, rows x cols) and `SCB` (fp32 per row).
            Scheme::EightBit => alloc::vec![elems, rows * 4],
        }
    }

    /// Bytes of every tensor [`Scheme::stored_tensors`] lists.
    pub fn stored_bytes(self, rows: u64, cols: u64) -> u64 {
        self.stored_tensors(rows, cols).iter().sum()
    }
}

/// Whether bitsandbytes' CUDA `gemm_4bit` runs an `m x k` input against an
/// `n x k` weight as "dequantize, then `F.linear`" (true) rather than its
/// fused kernel (false), by `_gemm_4bit_use_custom_cuda`'s rule for Hopper
/// (sm90, H100 and H200) with `sms` multiprocessors. The fused kernel
/// allocates only its output; the fallback a bf16 copy of the weight.
/// Training's inputs (`m` = tokens of the batch, above 1,536) always take
/// the fallback; decoding's few rows the fused kernel.
pub fn gemm_4bit_dequantizes(m: u64, n: u64, k: u64, sms: u64) -> bool {
    const CUSTOM_FLOOR_M: u64 = 4;
    const CUSTOM_MAX_M: u64 = 1536;
    if m <= CUSTOM_FLOOR_M {
        return false;
    }
    if m > CUSTOM_MAX_M || !k.is_multiple_of(FOUR_BIT_BLOCK) {
        return true;
    }
    let n_blocks = n.div_ceil(64);
    if n * k < 4 * 1024 * 1024 {
        if k * 2 < n {
            let low_wave = n_blocks * 3 < sms;
            return m > if low_wave { 512 } else { 320 };
        }
        if n_blocks * 4 <= sms {
            return m > 32;
        }
        if n_blocks * 2 <= sms {
            return m > 16;
        }
        return true;
    }
    if m > 512 {
        return true;
    }
    if m < 8 {
        if m >= 6 && n_blocks >= 36 {
            let under_three_quarters = n_blocks * 4 < sms * 3;
            let under_three_fifths = n_blocks * 5 < sms * 3;
            if k > n && under_three_quarters {
                return true;
            }
            if k == n && under_three_quarters && !under_three_fifths {
                return true;
            }
        }
        return false;
    }
    if n_blocks >= sms * 3 {
        return m > 64;
    }
    if n_blocks >= sms * 2 {
        return m > 48;
    }
    if n_blocks >= sms {
        return m > 32;
    }
    if n_blocks >= sms / 2 {
        if k >= n && n_blocks * 4 < sms * 3 {
            return true;
        }
        return m > 16;
    }
    true
}

/// `Linear4bit.forward`: the input cast to the compute dtype (bf16),
/// `gemm_4bit` (with the fallback's transients: the nested absmax
/// dequantized and offset, two fp32 vectors, then the bf16 weight), and
/// the output cast back to the input's dtype. `MatMul4Bit` saves no
/// activation: its backward dequantizes the weight again (a bf16 copy
/// that lives while the input's gradient is computed).
pub fn linear_4bit(g: &mut Graph, x: T, l: &Linear, nested: bool, name: &'static str) -> T {
    let rows = x.elems / l.in_features;
    let (n, k) = (l.out_features, l.in_features);
    let xin = cast(g, x, BF16, "bnb: input cast to the compute dtype");
    let dequantized = n * k * BF16;
    let blocks = (n * k).div_ceil(FOUR_BIT_BLOCK);
    let mut transients = Vec::new();
    if gemm_4bit_dequantizes(rows, n, k, u64::from(g.multiprocessors.0)) {
        if nested {
            for what in ["bnb: absmax dequantized", "bnb: absmax + offset"] {
                transients.push(g.op(
                    what,
                    &[l.weight],
                    blocks * 4,
                    Component::Transient,
                    Saves::NOTHING,
                ));
            }
        }
        transients.push(g.op(
            "bnb: weight dequantized",
            &[l.weight],
            dequantized,
            Component::Transient,
            Saves::NOTHING,
        ));
    }
    let backward_absmax = if nested { blocks * 4 } else { 0 };
    // `ctx.tensors = (None, B)`: the weight as a plain attribute, nothing
    // through `save_for_backward` (checkpointing's hooks count no saved
    // tensor here).
    let v = g.op(
        name,
        &[xin.v, l.weight],
        rows * n * BF16,
        Component::Transient,
        Saves::NOTHING.with_backward_workspace(backward_absmax),
    );
    g.mark_gemm(v, GradOrder::InputFirst);
    g.mark_dequantized_weight(v, dequantized);
    g.gemm();
    g.drop_all(&transients);
    g.drop(xin.v);
    let out = T {
        v,
        elems: rows * n,
        dsize: BF16,
    };
    let back = cast(g, out, x.dsize, "bnb: output cast to the input dtype");
    g.drop(out.v);
    back
}

/// Bytes per element of the fp16 copy LLM.int8 quantizes its input from.
const FP16: u64 = 2;

/// `Linear8bitLt.forward` (`MatMul8bitLt`, `llm_int8_threshold` 6.0): the
/// input copied to fp16 and quantized row-wise (int8 values and an fp32
/// scale per row; `A.abs() >= threshold` marks the outlier columns, a
/// temporary and a bool mask), the int8 matmul into int32, then
/// dequantized to fp16 and cast to the input's dtype. For a gradient it
/// keeps the input as given; its backward dequantizes the weight to the
/// input's dtype (`CB` times its scales) while the input's gradient is
/// computed. Outlier columns (a few, on random inputs) are not counted.
pub fn linear_8bit(g: &mut Graph, cx: &Ctx, x: T, l: &Linear, name: &'static str) -> T {
    let rows = x.elems / l.in_features;
    let (n, k) = (l.out_features, l.in_features);
    let half = if x.dsize == FP16 && cx.fp16 {
        g.hold(x.v);
        x
    } else {
        let v = g.op(
            "bnb: input copied to fp16",
            &[x.v],
            x.elems * FP16,
            Component::Transient,
            Saves::NOTHING,
        );
        T {
            v,
            elems: x.elems,
            dsize: FP16,
        }
    };
    let quantize = |g: &mut Graph, what: &'static str, bytes: u64| {
        g.op(what, &[half.v], bytes, Component::Transient, Saves::NOTHING)
    };
    let row_scales = quantize(g, "bnb: row scales", rows * 4);
    let quantized = quantize(g, "bnb: input quantized to int8", x.elems);
    let magnitude = quantize(g, "bnb: |input| (outlier search)", x.elems * FP16);
    let outliers = quantize(g, "bnb: outlier mask", x.elems);
    g.drop_all(&[magnitude, outliers, half.v]);
    let int32 = g.op(
        "bnb: int8 matmul (int32)",
        &[quantized, l.weight],
        rows * n * 4,
        Component::Transient,
        Saves::NOTHING,
    );
    // `int8_mm_dequant` writes fp16, then `.to(dtype)` (a copy unless the
    // input is fp16).
    let input_is_fp16 = x.dsize == FP16 && cx.fp16;
    let dequantized = (!input_is_fp16).then(|| {
        g.op(
            "bnb: int32 dequantized to fp16",
            &[int32],
            rows * n * FP16,
            Component::Transient,
            Saves::NOTHING,
        )
    });
    // `ctx.tensors = (CAt, subA, A)`: a plain attribute, which a
    // checkpointed layer's hooks never see. Outside checkpointing the
    // node holds the input; in a checkpointed forward the boundary does,
    // until the layer's backward; a recompute's copy goes with the
    // recompute (the layer's backward reads the first).
    let in_checkpoint = g.in_checkpoint();
    let input = [x.v];
    let saves = if in_checkpoint || !g.requires_grad(x.v) {
        Saves::NOTHING
    } else {
        Saves::inputs(&input)
    };
    let v = g.op(
        name,
        &[x.v, l.weight],
        rows * n * x.dsize,
        Component::Transient,
        saves,
    );
    if in_checkpoint && g.grad_mode && g.requires_grad(x.v) {
        g.keep_outside_hooks(x.v);
    }
    g.mark_gemm(v, GradOrder::InputFirst);
    g.mark_dequantized_weight(v, n * k * x.dsize);
    g.gemm();
    if let Some(d) = dequantized {
        g.drop(d);
    }
    g.drop_all(&[int32, quantized, row_scales]);
    T {
        v,
        elems: rows * n,
        dsize: x.dsize,
    }
}

/// A quantized linear (the layer's own casts do not depend on autocast;
/// the context says whether 2-byte activations are fp16).
pub fn linear(g: &mut Graph, cx: &mut Ctx, x: T, l: &Linear, name: &'static str) -> T {
    match l.quantized {
        Some(Scheme::FourBit { nested }) => linear_4bit(g, x, l, nested, name),
        Some(Scheme::EightBit) | None => linear_8bit(g, cx, x, l, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOPPER_SMS: u64 = 132;

    #[test]
    fn training_rows_dequantize_and_decoding_rows_do_not() {
        // Llama-3.1-8B's q_proj and down_proj at 2,048 tokens, then one
        // decoded token per sequence of a batch of 4.
        assert!(gemm_4bit_dequantizes(2048, 4096, 4096, HOPPER_SMS));
        assert!(gemm_4bit_dequantizes(2048, 4096, 14336, HOPPER_SMS));
        assert!(!gemm_4bit_dequantizes(4, 4096, 4096, HOPPER_SMS));
        assert!(!gemm_4bit_dequantizes(1, 128256, 4096, HOPPER_SMS));
    }

    #[test]
    fn nested_state_is_smaller_than_fp32_absmax() {
        let plain = Scheme::FourBit { nested: false }.stored_bytes(4096, 4096);
        let nested = Scheme::FourBit { nested: true }.stored_bytes(4096, 4096);
        // 16.8M values: 8 MiB packed; 1 MiB fp32 absmax, or 256 KiB of
        // uint8 absmax and 4 KiB of scales.
        assert_eq!(plain, 8_388_608 + 1_048_576 + 64);
        assert_eq!(nested, 8_388_608 + 64 + 4 + 262_144 + 4_096 + 1_024);
        assert_eq!(
            Scheme::EightBit.stored_bytes(4096, 11008),
            4096 * 11008 + 4096 * 4
        );
    }
}
