//! One decoder layer's forward: norms, attention with its projections,
//! rotary embeddings and KV cache, the residual sums and the MLP call.

use super::weights::fused_qkv;
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
        // Phi-3's attention keeps its fused output in the `qkv` local
        // until it returns.
        let mut qkv_local: Option<Value> = None;
        // Eager attention hands the values their gradient contiguous in
        // (b, heads, s, hd) (out of its products' copies, `repeat_kv`'s
        // sum or the cache's `cat`), so their view copies it too.
        let eager = matches!(self.attention, Attention::Eager);
        let (q, k, v) = if fused_qkv(a) {
            // GPT-2's c_attn(x).split(h, dim=2), Phi-3's slices of
            // qkv_proj(x): three views of one fused output.
            let name = if a.fused_projections {
                "attention: qkv_proj (fused q/k/v)"
            } else {
                "attention: c_attn (fused q/k/v)"
            };
            let qkv = nn::linear(g, cx, h1, &lw.q, name);
            let rows = qkv.elems / lw.q.out_features;
            g.hold(qkv.v);
            g.hold(qkv.v);
            if a.fused_projections {
                g.hold(qkv.v);
                qkv_local = Some(qkv.v);
            }
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
        } else if let Some((q_norm, k_norm)) = lw.qk_norms {
            // Qwen3: `q_norm(q_proj(x).view(...))`, then the same for the
            // keys, then `v_proj`; each projection's output is a temporary
            // of its line, freed once its norm returns.
            let q = nn::linear(g, cx, h1, &lw.q, "attention: q_proj");
            let qn = nn::rms_norm(g, q, q_norm, self.w_dsize(cx), hd, "attention: q_norm");
            g.drop(q.v);
            let qn = heads_first(g, qn, rope.is_some());
            let k = nn::linear(g, cx, h1, &lw.k, "attention: k_proj");
            let kn = nn::rms_norm(g, k, k_norm, self.w_dsize(cx), hd, "attention: k_norm");
            g.drop(k.v);
            let kn = heads_first(g, kn, rope.is_some());
            let v = nn::linear(g, cx, h1, &lw.v, "attention: v_proj");
            let v = heads_first(g, v, eager);
            (qn, kn, v)
        } else {
            let q = nn::linear(g, cx, h1, &lw.q, "attention: q_proj");
            let q = heads_first(g, q, rope.is_some());
            let k = nn::linear(g, cx, h1, &lw.k, "attention: k_proj");
            let k = heads_first(g, k, rope.is_some());
            let v = nn::linear(g, cx, h1, &lw.v, "attention: v_proj");
            let v = heads_first(g, v, eager);
            (q, k, v)
        };
        let (q, k) = match rope {
            Some((cos, sin)) => {
                g.at("attention: rotary embedding", layer);
                let qr = self.rotary(g, q, cos, sin);
                let kr = self.rotary(g, k, cos, sin);
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
        let masked = window.is_some_and(|w| nn::sliding_window_mask_needed(w as u64, kv_len));
        // `hidden_states, _ = self.self_attn(...)`: eager attention's
        // probabilities stay referenced by `_` until the layer returns.
        let mut kept_probs: Option<Value> = None;
        let attn = match self.attention {
            Attention::Sdpa if self.padded => {
                // A padding mask reaches SDPA: transformers repeats grouped
                // keys and values per query head (`use_gqa_in_sdpa` is false
                // with a mask), SDPA adds the mask as a bias and runs the
                // memory-efficient kernel (the H200 traces,
                // `measurements/padding/`).
                nn::sdpa_on_every_head(g, cx, q, k, v, shape, true)
            }
            Attention::Sdpa if masked && kvh < nh => {
                // A sliding-window mask is passed to sdpa, so transformers
                // repeats keys and values per query head (no enable_gqa).
                nn::sdpa_on_every_head(g, cx, q, k, v, shape, false)
            }
            // fp32 with grouped heads: no fused kernel takes it.
            Attention::Sdpa if kvh < nh && !cx.autocast && q.dsize == FP32 => {
                nn::sdpa_math(g, q, k, v, shape)
            }
            Attention::Sdpa if a.fused_projections && !masked && s > 1 => {
                // Phi-3's rotary `torch.cat` leaves the queries contiguous
                // in (b, heads, s, hd), and the flash kernel's output takes
                // the queries' layout (`empty_like`), so the caller's
                // `transpose(1, 2).contiguous()` copies it; in training
                // `o_proj` keeps the copy and the kernel its output (the
                // H200 trace of Phi-3-mini amp training b4 L1024: a 24 MiB
                // block per layer at `sdpa_attention.py:168`). A decode
                // step's single query is contiguous in either layout.
                let out = nn::sdpa(g, cx, q, k, v, shape);
                let copy = nn::unary(g, out, "attention: transpose(1, 2).contiguous()", out.dsize);
                g.drop(out.v);
                copy
            }
            Attention::Sdpa => nn::sdpa(g, cx, q, k, v, shape),
            Attention::Eager => {
                // GPT-2's eager attention: a plain softmax, then dropout on
                // the probabilities in training (transformers 5.17's
                // `modeling_gpt2.eager_attention_forward`).
                // Which operands are transposed views of their projection:
                // the cache's `cat` and `repeat_kv` return contiguous keys
                // and values, and Phi-3's rotary `cat` contiguous queries
                // and keys (see `nn::EagerSoftmax::strided`).
                let projected_kv = cache.is_none() && kvh == nh;
                let strided = nn::Operands {
                    query: !a.fused_projections,
                    key: projected_kv && !a.fused_projections,
                    value: projected_kv,
                };
                let style = if self.a.norm == NormKind::LayerNorm {
                    nn::EagerSoftmax {
                        fp32: cx.autocast,
                        dropout: call.gpt2_dropout,
                        dropout_before_cast: false,
                        half_to_float: cx.fp16,
                        strided,
                        softcap: false,
                        autocast: cx.autocast,
                    }
                } else {
                    nn::EagerSoftmax {
                        fp32: true,
                        dropout: false,
                        dropout_before_cast: false,
                        half_to_float: cx.fp16,
                        strided,
                        softcap: self.a.attn_logit_softcapping,
                        autocast: cx.autocast,
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
        if let Some(qkv) = qkv_local {
            g.drop(qkv);
        }
        if call.gpt2_dropout {
            let d = nn::dropout(g, o, "attention: residual dropout");
            g.drop(o.v);
            o = d;
        }
        // GPT-2's block names the attention output (`attn_output`) and adds
        // it into `hidden_states`: the norm's output goes when that name is
        // rebound, after the add, and `attn_output` lives until the block
        // returns; the others rebind `hidden_states` to the attention's
        // output (the H200 trace of GPT-2 fp16 generation, b32 L512,
        // `measurements/generation-search/trace-segments-gpt2.jsonl.gz`).
        let gpt2_block = self.a.norm == NormKind::LayerNorm;
        if !gpt2_block {
            g.drop(h1.v);
        }
        if let Some((after_attention, _)) = lw.sandwich_norms {
            g.at("attention: post-attention norm", layer);
            let n = self.norm(g, cx, o, after_attention, "attention: post-attention norm");
            g.drop(o.v);
            o = n;
        }
        let x2 = nn::add(g, x, o, "attention: residual add");
        if gpt2_block {
            g.drop(h1.v);
        } else {
            g.drop(o.v);
        }
        g.at("mlp: post-attention norm", layer);
        let h2 = self.norm(g, cx, x2, lw.norm2, "mlp: post-attention norm");
        let mut d = self.mlp(g, cx, h2, &lw.mlp, call.decode, layer);
        if !gpt2_block {
            g.drop(h2.v);
        }
        if let Some((_, after_mlp)) = lw.sandwich_norms {
            g.at("mlp: post-feedforward norm", layer);
            let n = self.norm(g, cx, d, after_mlp, "mlp: post-feedforward norm");
            g.drop(d.v);
            d = n;
        }
        if call.gpt2_dropout {
            let dd = nn::dropout(g, d, "mlp: residual dropout");
            g.drop(d.v);
            d = dd;
        }
        g.at("mlp: residual add", layer);
        let out = nn::add(g, x2, d, "mlp: residual add");
        if gpt2_block {
            // `hidden_states` rebound, then the locals as the block returns.
            g.drop_all(&[h2.v, x2.v, o.v, d.v]);
        } else {
            g.drop_all(&[x2.v, d.v]);
        }
        if let Some(p) = kept_probs {
            g.drop(p);
        }
        out
    }

    /// Rotary embeddings on one head-split tensor. Phi-3 rotates a slice
    /// of each head and concatenates the rest (`torch.cat([rotated,
    /// pass], dim=-1)`): one more copy of the result, even when the rest
    /// is empty.
    fn rotary(&self, g: &mut Graph, x: T, cos: T, sin: T) -> T {
        let rotated = nn::rotary(g, x, cos, sin);
        if !self.a.fused_projections {
            return rotated;
        }
        let joined = nn::unary(g, rotated, "rotary: cat([rotated, pass])", rotated.dsize);
        g.drop(rotated.v);
        joined
    }
}

/// `proj(x).view(b, s, heads, hd).transpose(1, 2)` ahead of rotary
/// embeddings (and for eager attention's values): a view, but the
/// gradient handed back to it is contiguous in (b, heads, s, hd), so the
/// view's backward (`reshape` to the projection's shape) copies it (the
/// values' too: the H200 trace of checkpointed Llama-3.2-1B eager amp
/// training, `trace-segments-28.jsonl.gz`, event 1,865: a 4 MiB copy
/// before `v_proj`'s backward). Recorded right after its
/// projection, as transformers writes it, so backward copies the keys'
/// gradient after `v_proj`'s backward and the queries' after `k_proj`'s:
/// the H200 trace of Llama-3.2-1B bf16 training
/// (`measurements/h200-generalization/trace-segments-28.jsonl.gz`, event
/// 1,185: an 8 MiB key gradient, the rotary's freed, then `k_proj`). The
/// returned value is the view; the projection's output stays held until
/// the view is dropped ([`release_heads_first`]).
fn heads_first(g: &mut Graph, x: T, copied_grad: bool) -> T {
    if !copied_grad {
        return x;
    }
    let view = g.slice("attention: view + transpose(1, 2)", x.v, x.bytes());
    g.drop(x.v);
    T { v: view, ..x }
}
