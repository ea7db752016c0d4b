//! Normalisation layers: HF's RMSNorm and `F.layer_norm`.

use super::{cast, mul, unary, unary_saving_input, Ctx, FP32, T};
use crate::component::Component;
use crate::graph::{Graph, Saves, Value};

/// The part both RMSNorms share, an fp32 product:
/// `x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)`. `x.float()` and
/// the row statistics are released once it exists (kept by autograd for
/// backward in training).
fn normalized_fp32(g: &mut Graph, x: T, hidden: u64, name: &'static str) -> T {
    let rows = x.elems / hidden;
    let x32 = cast(g, x, FP32, name);
    let p = unary_saving_input(g, x32, name, FP32);
    // `pow`'s derivative, `grad * (exponent * self.pow(exponent - 1))`,
    // holds two temporaries until its result exists (the reward-model
    // trace's RMSNorm backwards: four 128 MiB blocks with the mean's).
    g.set_backward_temporaries(p.v, 2);
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
    // `MulBackward0` computes the broadcast factor's gradient first, as the
    // full-size `grad * x`, then `x`'s, and only then sums the first to
    // the factor's (rows, 1) shape and frees it (the reward-model trace,
    // events 996 to 999).
    g.set_backward_temporaries(n.v, 1);
    g.drop_all(&[rs.v, x32.v]);
    n
}

/// A trainable norm weight's gradient from `weight * x` (broadcast over
/// the rows): `(grad * x).sum_to(weight)`, a product of `x`'s size, then
/// the reduction's staging buffer, both freed once the weight's gradient
/// exists ([`Graph::set_backward_nested`]).
fn weight_gradient_through_product(g: &mut Graph, out: T, w: T, x: T, hidden: u64) {
    if g.requires_grad(w.v) && g.requires_grad(out.v) {
        let rows = x.elems / hidden.max(1);
        let buffer = super::column_sum_buffer(rows, hidden, x.dsize, g.multiprocessors);
        g.set_backward_nested(out.v, [x.bytes(), buffer]);
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
    let n = normalized_fp32(g, x, hidden, name);
    let c = cast(g, n, x.dsize, name);
    let w = T {
        v: weight,
        elems: hidden,
        dsize: weight_dsize,
    };
    // `return self.weight * hidden_states.to(input_dtype)`: the fp32
    // `hidden_states` is a local until the return, after the product.
    let out = mul(g, w, c, name);
    weight_gradient_through_product(g, out, w, c, hidden);
    g.drop(c.v);
    g.drop(n.v);
    out
}

/// Gemma's RMSNorm (transformers 5.17 `Gemma2RMSNorm`): `output =
/// x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)`, then
/// `output * (1.0 + weight.float())` and `.type_as(x)`. Both products are fp32, and in
/// training both are kept (where HF's Llama RMSNorm keeps the second in the
/// input's dtype); `_norm`'s argument `x.float()` is released as `_norm`
/// returns.
pub fn gemma_rms_norm(
    g: &mut Graph,
    x: T,
    weight: Value,
    weight_dsize: u64,
    hidden: u64,
    name: &'static str,
) -> T {
    let n = normalized_fp32(g, x, hidden, name);
    let w = T {
        v: weight,
        elems: hidden,
        dsize: weight_dsize,
    };
    let w32 = cast(g, w, FP32, name);
    let one_plus_w = unary(g, w32, name, FP32);
    g.drop(w32.v);
    let weighted = mul(g, n, one_plus_w, name);
    g.drop_all(&[one_plus_w.v, n.v]);
    let out = cast(g, weighted, x.dsize, name);
    g.drop(weighted.v);
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
