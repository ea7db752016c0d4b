//! One decoder layer's forward: norms, attention with its projections,
//! rotary embeddings and KV cache, the residual sums and the MLP call.

use super::{Call, KvCache, Model};
use crate::arch::NormKind;
use crate::families::nn::{self, AttnShape, Ctx, FP32, T};
use crate::graph::{Graph, Value};
use crate::workload::Attention;

impl Model<'_> {
    /// One decoder layer; `x` is held by the caller.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn layer(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        l: usize,
        x: T,
        call: &Call,
        rope: Option<(T, T)>,
        cache: &mut Option<KvCache>,
        eager_mask: Option<T>,
    ) -> T {
        let a = self.a;
        let lw = self.w.layers[l];
        let layer = Some(l as u32);
        let b = call.batch;
        let s = call.tokens;
        let (nh, kvh, hd) = (a.num_heads as u64, a.num_kv_heads as u64, a.head_dim as u64);
        g.at("attention: input norm", layer);
        let h1 = self.norm(g, cx, x, lw.norm1, "attention: input norm");
        g.at("attention: q/k/v projections", layer);
        let (q, k, v) = if a.norm == NormKind::LayerNorm {
            // c_attn(x).split(h, dim=2): three views of one fused output.
            let qkv = nn::linear(g, cx, h1, &lw.q, "attention: c_attn (fused q/k/v)");
            let rows = qkv.elems / lw.q.out_features;
            g.hold(qkv.v);
            g.hold(qkv.v);
            (
                T {
                    elems: rows * nh * hd,
                    ..qkv
                },
                T {
                    elems: rows * kvh * hd,
                    ..qkv
                },
                T {
                    elems: rows * kvh * hd,
                    ..qkv
                },
            )
        } else {
            let q = nn::linear(g, cx, h1, &lw.q, "attention: q_proj");
            let k = nn::linear(g, cx, h1, &lw.k, "attention: k_proj");
            let v = nn::linear(g, cx, h1, &lw.v, "attention: v_proj");
            (q, k, v)
        };
        let (q, k) = match rope {
            Some((cos, sin)) => {
                g.at("attention: rotary embedding", layer);
                let qr = nn::rotary(g, q, cos, sin);
                let kr = nn::rotary(g, k, cos, sin);
                g.drop_all(&[q.v, k.v]);
                (qr, kr)
            }
            None => (q, k),
        };
        // KV cache: DynamicLayer.update = torch.cat([cache, new], dim=-2).
        let window = a.layer_sliding_window(l as u32);
        let (k, v, kv_len) = match cache {
            Some(c) => {
                g.at("attention: KV cache update (torch.cat)", layer);
                let (nk, nv, total, elems) =
                    c.update(g, l, s, b * kvh * hd, window, Some((k.v, v.v)));
                g.drop_all(&[k.v, v.v]);
                g.hold(nk);
                g.hold(nv);
                let dsize = k.dsize;
                if !c.dtype.is_float() {
                    // Quantised caches dequantise the layer's keys and values per call.
                    g.workspace("KV cache: dequantize", 2 * elems * dsize);
                }
                (
                    T {
                        v: nk,
                        elems,
                        dsize,
                    },
                    T {
                        v: nv,
                        elems,
                        dsize,
                    },
                    total,
                )
            }
            None => (k, v, s),
        };
        g.at("attention: scaled dot product", layer);
        let shape = AttnShape {
            batch: b,
            heads: nh,
            kv_heads: kvh,
            q_len: s,
            kv_len,
            head_dim: hd,
        };
        let masked = window.is_some() && s > 1;
        // `hidden_states, _ = self.self_attn(...)`: eager attention's
        // probabilities stay referenced by `_` until the layer returns.
        let mut kept_probs: Option<Value> = None;
        let attn = match self.attention {
            Attention::Sdpa if masked && kvh < nh => {
                // A sliding-window mask is passed to sdpa, so transformers
                // repeats keys and values per query head (no enable_gqa).
                let kr = nn::unary(
                    g,
                    T {
                        elems: b * nh * kv_len * hd,
                        ..k
                    },
                    "attention: repeat_kv (keys)",
                    k.dsize,
                );
                let vr = nn::unary(
                    g,
                    T {
                        elems: b * nh * kv_len * hd,
                        ..v
                    },
                    "attention: repeat_kv (values)",
                    v.dsize,
                );
                let out = nn::sdpa(
                    g,
                    cx,
                    q,
                    kr,
                    vr,
                    AttnShape {
                        kv_heads: nh,
                        ..shape
                    },
                );
                g.drop_all(&[kr.v, vr.v]);
                out
            }
            // fp32 with grouped heads: no fused kernel takes it.
            Attention::Sdpa if kvh < nh && !cx.autocast && q.dsize == FP32 => {
                nn::sdpa_math(g, q, k, v, shape)
            }
            Attention::Sdpa => nn::sdpa(g, cx, q, k, v, shape),
            Attention::Eager => {
                // GPT-2's eager attention: a plain softmax, then dropout on
                // the probabilities in training (transformers 5.17's
                // `modeling_gpt2.eager_attention_forward`).
                let style = if self.a.norm == NormKind::LayerNorm {
                    nn::EagerSoftmax {
                        fp32: cx.autocast,
                        dropout: call.gpt2_dropout,
                        dropout_before_cast: false,
                        half_to_float: cx.fp16,
                        strided_key: false,
                    }
                } else {
                    nn::EagerSoftmax {
                        fp32: true,
                        dropout: false,
                        dropout_before_cast: false,
                        half_to_float: cx.fp16,
                        strided_key: false,
                    }
                };
                let (out, probs) = nn::eager_attention(g, q, k, v, shape, eager_mask, style);
                kept_probs = Some(probs);
                out
            }
        };
        g.at("attention: o_proj", layer);
        let mut o = nn::linear(g, cx, attn, &lw.o, "attention: o_proj");
        g.drop(attn.v);
        // `query_states`, `key_states` and `value_states` are locals of the
        // attention module's forward: released when it returns, after
        // `o_proj` (the H200 trace: the rotated queries' block is freed
        // after `o_proj`'s output is allocated, so `o_proj` cannot reuse it).
        g.drop_all(&[q.v, k.v, v.v]);
        if call.gpt2_dropout {
            let d = nn::dropout(g, o, "attention: residual dropout");
            g.drop(o.v);
            o = d;
        }
        g.drop(h1.v);
        let x2 = nn::add(g, x, o, "attention: residual add");
        g.drop(o.v);
        g.at("mlp: post-attention norm", layer);
        let h2 = self.norm(g, cx, x2, lw.norm2, "mlp: post-attention norm");
        let mut d = self.mlp(g, cx, h2, &lw.mlp, call.decode, layer);
        g.drop(h2.v);
        if call.gpt2_dropout {
            let dd = nn::dropout(g, d, "mlp: residual dropout");
            g.drop(d.v);
            d = dd;
        }
        g.at("mlp: residual add", layer);
        let out = nn::add(g, x2, d, "mlp: residual add");
        g.drop_all(&[x2.v, d.v]);
        if let Some(p) = kept_probs {
            g.drop(p);
        }
        out
    }
}
