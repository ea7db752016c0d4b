//! The decoder's MLPs: gated (SwiGLU), GPT-2's plain one, and
//! mixture-of-experts layers (grouped experts in prefill and training,
//! `batched_mm` in decode steps).

use super::{Mlp, Model};
use crate::component::Component;
use crate::families::nn::{self, Ctx, Linear, FP32, INT64, T};
use crate::graph::{Graph, Saves, Value};
use alloc::vec::Vec;

impl Model<'_> {
    pub(super) fn mlp(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        x: T,
        mlp: &Mlp,
        decode: bool,
        layer: Option<u32>,
    ) -> T {
        match *mlp {
            Mlp::Gated { gate, up, down } => {
                g.at("mlp: gate_proj", layer);
                let gt = nn::linear(g, cx, x, &gate, "mlp: gate_proj");
                g.at("mlp: activation", layer);
                let act = nn::unary_saving_input(g, gt, "mlp: act_fn(gate)", gt.dsize);
                g.drop(gt.v);
                g.at("mlp: up_proj", layer);
                let u = nn::linear(g, cx, x, &up, "mlp: up_proj");
                g.at("mlp: act(gate) * up", layer);
                let m = nn::mul(g, act, u, "mlp: act(gate) * up");
                g.drop_all(&[act.v, u.v]);
                g.at("mlp: down_proj", layer);
                let d = nn::linear(g, cx, m, &down, "mlp: down_proj");
                g.drop(m.v);
                d
            }
            Mlp::GatedFused { gate_up, down } => {
                // Phi-3: `gate, up_states = gate_up_proj(x).chunk(2, dim=-1)`,
                // then `up_states = up_states * act_fn(gate)`: the halves
                // are views, and the `gate` local keeps the whole output
                // until the MLP returns.
                g.at("mlp: gate_up_proj", layer);
                let gu = nn::linear(g, cx, x, &gate_up, "mlp: gate_up_proj");
                g.hold(gu.v);
                let half = T {
                    elems: gu.elems / 2,
                    ..gu
                };
                g.at("mlp: activation", layer);
                let act = nn::unary_saving_input(g, half, "mlp: act_fn(gate)", gu.dsize);
                g.at("mlp: up * act(gate)", layer);
                let m = nn::mul(g, half, act, "mlp: up * act_fn(gate)");
                g.drop(act.v);
                // `up_states` now names the product.
                g.drop(gu.v);
                g.at("mlp: down_proj", layer);
                let d = nn::linear(g, cx, m, &down, "mlp: down_proj");
                g.drop(m.v);
                // The `gate` local, as the MLP returns.
                g.drop(gu.v);
                d
            }
            Mlp::Plain { fc, proj } => {
                g.at("mlp: c_fc", layer);
                let f = nn::linear(g, cx, x, &fc, "mlp: c_fc");
                g.at("mlp: gelu_new", layer);
                let act = gelu_new(g, cx, f);
                g.drop(f.v);
                g.at("mlp: c_proj", layer);
                let d = nn::linear(g, cx, act, &proj, "mlp: c_proj");
                g.drop(act.v);
                d
            }
            Mlp::Moe {
                router,
                experts,
                top_k,
                gate_up,
                down,
                shared,
            } => {
                // Qwen2-MoE: the shared expert runs first and its output is
                // held while the routed experts run.
                let shared_out = shared.map(|(sg, su, sd)| {
                    g.at("moe: shared expert", layer);
                    let gt = nn::linear(g, cx, x, &sg, "moe: shared expert gate");
                    let act = nn::unary_saving_input(g, gt, "moe: shared expert act", gt.dsize);
                    g.drop(gt.v);
                    let u = nn::linear(g, cx, x, &su, "moe: shared expert up");
                    let m = nn::mul(g, act, u, "moe: shared expert act * up");
                    g.drop_all(&[act.v, u.v]);
                    let d = nn::linear(g, cx, m, &sd, "moe: shared expert down");
                    g.drop(m.v);
                    d
                });
                let h = self.a.hidden_size as u64;
                g.at("moe: router", layer);
                let rl = nn::linear(
                    g,
                    cx,
                    x,
                    &Linear {
                        weight: router,
                        weight_dsize: gate_up.weight_dsize,
                        bias: None,
                        in_features: h,
                        out_features: experts,
                        lora: None,
                        quantized: None,
                    },
                    "moe: router",
                );
                // `router_logits.float()`, softmax, top-k (small).
                let probs = nn::unary(g, rl, "moe: router softmax", FP32);
                g.drop_all(&[rl.v]);
                g.drop(probs.v);
                let out = if decode {
                    self.batched_experts(g, x, top_k, gate_up, down, layer)
                } else {
                    self.grouped_experts(g, cx, x, experts, top_k, gate_up, down, layer)
                };
                match shared_out {
                    Some(d) => {
                        // sigmoid(shared_expert_gate(x)) * shared output, then the sum.
                        // The product keeps the shared expert's output for
                        // the gate's gradient.
                        let gated = nn::unary_saving_input(
                            g,
                            d,
                            "moe: shared expert * sigmoid gate",
                            d.dsize,
                        );
                        g.drop(d.v);
                        let sum = nn::add(g, out, gated, "moe: add shared expert");
                        g.drop_all(&[out.v, gated.v]);
                        sum
                    }
                    None => out,
                }
            }
        }
    }

    /// Bytes per element of the experts' outputs once weighted by the
    /// router (`proj_out * sample_weights`): the hidden states' dtype when
    /// the router casts its weights back to it (Qwen2-MoE), else fp32
    /// (Mixtral's router keeps them fp32, which promotes the product; the
    /// H200 trace of Qwen1.5-MoE generation: four 128 MiB (S, hidden) bf16
    /// blocks at the last prefill layer's `grouped_mm_experts_forward`
    /// peak, where fp32 would take 256 MiB each for the last two).
    fn weighted_dsize(&self, hidden_dsize: u64) -> u64 {
        match self.a.moe {
            Some(m) if m.routing_weights_in_model_dtype => hidden_dsize,
            _ => FP32,
        }
    }

    /// The experts of a decode step, as `generate` runs them on a GPU
    /// (`batched_mm_experts_forward`, `integrations/moe.py`): each token
    /// repeated once per chosen expert (`S = tokens x top_k` rows), then
    /// the chosen experts' gate/up weights gathered per row
    /// (`gate_up_proj[expert_ids]`: S copies of an expert's weights), a
    /// batched GEMM, the gated activation, the down weights gathered the
    /// same way (allocated before the gate/up copies are released, so both
    /// are live together), the down GEMM, the routing weights and a
    /// sum over the top-k. Mixtral-8x7B at batch 8: 3.5 GiB and 1.75 GiB of
    /// weight copies per layer, the peak of the run
    /// (`measurements/h200-generalization/trace-snapshots-4.md`).
    fn batched_experts(
        &self,
        g: &mut Graph,
        x: T,
        top_k: u64,
        gate_up: Linear,
        down: Linear,
        layer: Option<u32>,
    ) -> T {
        let h = self.a.hidden_size as u64;
        let tokens = x.elems / h;
        let pairs = tokens * top_k;
        let i = down.in_features;
        let op = |g: &mut Graph, name, inputs: &[Value], bytes| {
            g.op(name, inputs, bytes, Component::Transient, Saves::NOTHING)
        };
        g.at("moe: experts (batched_mm, decode)", layer);
        let rows = op(
            g,
            "moe: repeat tokens per expert",
            &[x.v],
            pairs * h * x.dsize,
        );
        g.at("moe: expert ids", layer);
        let ids = g.input(pairs * INT64, Component::Transient);
        let gu_weights = op(
            g,
            "moe: gate_up_proj[expert_ids]",
            &[gate_up.weight],
            pairs * 2 * i * h * gate_up.weight_dsize,
        );
        let gu = op(
            g,
            "moe: batched gate_up",
            &[rows, gu_weights],
            pairs * 2 * i * x.dsize,
        );
        let act = op(g, "moe: act(gate)", &[gu], pairs * i * x.dsize);
        let gated = op(g, "moe: act(gate) * up", &[act, gu], pairs * i * x.dsize);
        g.drop_all(&[act, gu]);
        let down_weights = op(
            g,
            "moe: down_proj[expert_ids]",
            &[down.weight],
            pairs * h * i * down.weight_dsize,
        );
        g.drop(gu_weights);
        let d = op(
            g,
            "moe: batched down_proj",
            &[gated, down_weights],
            pairs * h * x.dsize,
        );
        g.drop(gated);
        let wd = self.weighted_dsize(x.dsize);
        let weighted = op(g, "moe: * routing weights", &[d], pairs * h * wd);
        let summed = T {
            v: op(g, "moe: sum over top-k", &[weighted], tokens * h * wd),
            elems: tokens * h,
            dsize: wd,
        };
        let out = nn::cast(g, summed, x.dsize, "moe: .to(hidden dtype)");
        g.drop_all(&[summed.v, weighted, d, down_weights, ids, rows]);
        out
    }

    /// transformers 5.17's default experts implementation (`grouped_mm`,
    /// `integrations/moe.py`): every (token, expert) pair at once. The
    /// pairs are sorted by expert and the tokens gathered (`S = tokens x
    /// top_k` rows), the concatenated gate/up projection runs as one grouped
    /// GEMM (then an out-of-place `masked_fill`), the gated activation, the
    /// down projection (and its `masked_fill`), the routing weights,
    /// the inverse permutation and a sum over the top-k; every local lives
    /// until the function returns. (The per-expert loop of older releases
    /// needed an expert's share of this; the grouped version needs all of it.)
    #[allow(clippy::too_many_arguments)]
    fn grouped_experts(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        x: T,
        experts: u64,
        top_k: u64,
        gate_up: Linear,
        down: Linear,
        layer: Option<u32>,
    ) -> T {
        let h = self.a.hidden_size as u64;
        let tokens = x.elems / h;
        let pairs = tokens * top_k;
        let i = gate_up.out_features / experts / 2;
        g.at("moe: experts (grouped_mm)", layer);
        let mut locals: Vec<Value> = Vec::new();
        // Index tensors: no gradient, so no autograd node.
        let mut small = |g: &mut Graph, name: &'static str, bytes: u64| {
            g.at(name, layer);
            locals.push(g.input(bytes, Component::Transient));
        };
        // sort -> (expert_ids_g, perm), sample_weights_g, expert_ids_g.int(), sentinel mask.
        small(g, "moe: sort expert ids", pairs * INT64);
        small(g, "moe: sort permutation", pairs * INT64);
        g.at("moe: perm // top_k", layer);
        let div = g.input(pairs * INT64, Component::Transient);
        // `hidden_states[perm // top_k]`: index's backward keeps the
        // indices, not the source.
        let gathered = g.op(
            "moe: gather tokens by expert",
            &[x.v],
            pairs * h * x.dsize,
            Component::Transient,
            Saves::NOTHING,
        );
        g.drop(div);
        let gathered = T {
            v: gathered,
            elems: pairs * h,
            dsize: x.dsize,
        };
        let wd = self.weighted_dsize(x.dsize);
        small(g, "moe: routing weights by expert", pairs * wd);
        small(g, "moe: expert ids int32", pairs * 4);
        small(g, "moe: sentinel mask", pairs);
        let all_gu = Linear {
            in_features: h,
            out_features: 2 * i,
            lora: None,
            ..gate_up
        };
        let gu = nn::linear(g, cx, gathered, &all_gu, "moe: grouped gate_up");
        let gu_masked = nn::unary(g, gu, "moe: gate_up masked_fill", gu.dsize);
        g.drop(gu.v);
        let gate = T {
            elems: pairs * i,
            ..gu_masked
        };
        let act = nn::unary_saving_input(g, gate, "moe: act(gate)", gu_masked.dsize);
        let gated = nn::mul(g, act, gate, "moe: act(gate) * up");
        g.drop_all(&[act.v, gu_masked.v]);
        let all_down = Linear {
            in_features: i,
            out_features: h,
            lora: None,
            ..down
        };
        let d = nn::linear(g, cx, gated, &all_down, "moe: grouped down_proj");
        g.drop(gated.v);
        let d_masked = nn::unary(g, d, "moe: down masked_fill", d.dsize);
        g.drop(d.v);
        // `proj_out * sample_weights_g`: both factors need gradients in
        // training (the router's input does), so the product keeps the
        // masked expert outputs.
        let weighted = nn::unary_saving_input(g, d_masked, "moe: * routing weights", wd);
        small(g, "moe: inverse permutation", pairs * INT64);
        g.at("moe: arange", layer);
        let arange = g.input(pairs * INT64, Component::Transient);
        g.drop(arange);
        let restored = nn::unary(g, weighted, "moe: restore token order", wd);
        g.drop(weighted.v);
        let summed = g.op(
            "moe: sum over top-k",
            &[restored.v],
            tokens * h * wd,
            Component::Transient,
            Saves::NOTHING,
        );
        let summed = T {
            v: summed,
            elems: tokens * h,
            dsize: wd,
        };
        let out = nn::cast(g, summed, x.dsize, "moe: .to(hidden dtype)");
        g.drop_all(&[summed.v, restored.v, d_masked.v, gathered.v]);
        g.drop_all(&locals);
        out
    }
}

/// `NewGELUActivation`: `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`
/// evaluated op by op in Python (pow runs in fp32 under autocast).
fn gelu_new(g: &mut Graph, cx: &Ctx, x: T) -> T {
    let half = nn::unary(g, x, "gelu_new: 0.5 * x", x.dsize);
    // Under autocast `torch.pow` runs in fp32 on a cast copy of `x`, and
    // its backward saves that copy (the H200 trace: four tensors per layer
    // at `activations.py:66`, fp32 copy, 0.5 * x, tanh, 1 + tanh).
    let cube = if cx.autocast && x.dsize != FP32 {
        let x32 = nn::cast(g, x, FP32, "gelu_new: autocast cast to fp32");
        let cube = nn::unary_saving_input(g, x32, "gelu_new: pow(x, 3)", FP32);
        g.drop(x32.v);
        cube
    } else {
        nn::unary_saving_input(g, x, "gelu_new: pow(x, 3)", x.dsize)
    };
    let pd = cube.dsize;
    let scaled = nn::unary(g, cube, "gelu_new: 0.044715 * x^3", pd);
    g.drop(cube.v);
    let inner = nn::add(g, x, scaled, "gelu_new: x + ...");
    g.drop(scaled.v);
    let arg = nn::unary(g, inner, "gelu_new: sqrt(2/pi) * ...", inner.dsize);
    g.drop(inner.v);
    let th = nn::tanh(g, arg, "gelu_new: tanh");
    g.drop(arg.v);
    let one = nn::unary(g, th, "gelu_new: 1 + tanh", th.dsize);
    g.drop(th.v);
    let out = nn::mul(g, half, one, "gelu_new: product");
    g.drop_all(&[half.v, one.v]);
    out
}
