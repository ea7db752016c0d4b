//! Decoder-only LLMs as transformers 5.17 runs them (Llama, Mistral, Qwen2,
//! Mixtral, Gemma 2, Phi-3 shapes through the Llama code path; GPT-2 with
//! LayerNorm, learned positions, `gelu_new` and dropout).
//!
//! What is allocated, per decoder layer (prefill or training forward):
//! RMSNorm's fp32 upcast and `pow` temporaries, q/k/v projections, rotary
//! `q*cos + rotate_half(q)*sin` temporaries, the KV-cache copy
//! (`DynamicLayer.update` is a `torch.cat` onto an empty tensor), SDPA's
//! output (already in the layout `o_proj` reads), `o_proj`, the residual
//! sum, then the MLP (`down(act(gate(x)) * up(x))`: the gate output is freed
//! when `act_fn` returns, so `up` reuses its block; activation, up output and
//! product alive together). `inputs_embeds` stays referenced through the
//! whole layer loop. Under autocast every linear casts its input to bf16 (no
//! cache) and its weight to bf16 (cached until the autocast region ends and
//! saved for backward; not cached inside checkpointed layers). The H200
//! allocation trace in `measurements/h200-segments` shows this sequence.

use super::nn::{self, AttnShape, Ctx, Linear, BF16, FP32, INT64, T};
use super::optim::{self, OptimizerState, Trainable};
use super::sharding::{self, Fsdp2, Fsdp2Options, Unit, UnitId};
use super::ReplaySummary;
use crate::arch::{DecoderArch, Dtype, MlpKind, NormKind};
use crate::component::Component;
use crate::error::Error;
use crate::graph::{Graph, Saves, UnitEvent, Value};
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Attention, InferenceKind, LoadPath, Logits, Mode, Precision, Workload};
use alloc::vec::Vec;
use core::cell::RefCell;

/// Rejects workloads the decoder family cannot run.
pub fn validate(workload: &Workload) -> Result<(), Error> {
    if workload.mode == Mode::Inference
        && workload.inference.kind == InferenceKind::Generate
        && workload.inference.logits == Logits::None
    {
        return Err(Error::invalid(
            "workload.inference.logits",
            "generation needs logits",
            "\"last\" or \"all\" for kind \"generate\"",
        ));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
enum Mlp {
    Gated {
        gate: Linear,
        up: Linear,
        down: Linear,
    },
    Plain {
        fc: Linear,
        proj: Linear,
    },
    Moe {
        router: Value,
        experts: u64,
        top_k: u64,
        gate_up: Linear,
        down: Linear,
        shared: Option<(Linear, Linear, Linear)>,
    },
}

#[derive(Clone, Copy, Debug)]
struct Layer {
    norm1: Value,
    q: Linear,
    k: Linear,
    v: Linear,
    o: Linear,
    norm2: Value,
    mlp: Mlp,
}

struct Weights {
    /// FSDP2's units, when the job is sharded that way (`trainable` then
    /// lists the sharded parameters the optimizer updates).
    fsdp: Option<Fsdp2>,
    embed: Value,
    positions: Option<Value>,
    layers: Vec<Layer>,
    norm: Value,
    lm_head: Linear,
    trainable: Vec<Trainable>,
    params: u64,
    bytes: u64,
}

/// How the weights are stored and which ones train.
#[derive(Clone, Copy)]
struct Storage {
    /// Element size of float parameters.
    dsize: u64,
    /// Linear weights quantised (int8/int4).
    quant: Option<Dtype>,
    /// Base weights frozen (LoRA).
    frozen: bool,
    /// LoRA rank and target mask, when adapters are attached.
    lora_rank: u64,
}

struct Builder<'a, 'r> {
    g: &'a mut Graph<'r>,
    s: Storage,
    trainable: Vec<Trainable>,
    params: u64,
    bytes: u64,
    /// FSDP2: the units being built.
    shards: Option<ShardBuild>,
}

/// FSDP2 units as `fully_shard` makes them: each decoder layer, then the
/// root (every parameter outside the layers).
struct ShardBuild {
    world: u64,
    /// Bytes per element of the sharded parameters (the training
    /// precision's parameter dtype).
    orig_dsize: u64,
    /// The unit whose parameters are being created.
    current: Unit,
    layers: Vec<Unit>,
    root: Unit,
}

impl Builder<'_, '_> {
    /// FSDP2: the parameters created so far belong to the root (`None`) or
    /// to decoder layer `Some(n)`.
    fn end_unit(&mut self, layer: bool) {
        if let Some(sb) = self.shards.as_mut() {
            let unit = core::mem::take(&mut sb.current);
            if layer {
                sb.layers.push(unit);
            } else {
                sb.root.params.extend(unit.params);
                sb.root.shards.extend(unit.shards);
            }
        }
    }

    fn tensor(&mut self, rows: u64, cols: u64, quantizable: bool) -> Value {
        let elems = rows * cols;
        if let Some(sb) = self.shards.as_mut() {
            // fully_shard: this rank's dim-0 shard (padded to ceil(rows /
            // world) rows) in the parameter dtype, allocated now; the
            // unsharded parameter (padded rows, `param_dtype`) exists only
            // while its unit is gathered.
            let shard_rows = rows.div_ceil(sb.world);
            let shard_bytes = shard_rows * cols * sb.orig_dsize;
            let shard = self.g.param(shard_bytes, false);
            let unsharded_rows = shard_rows * sb.world;
            let v = self.g.param_deferred(unsharded_rows * cols * self.s.dsize);
            sb.current.params.push(Trainable {
                value: v,
                dsize: self.s.dsize,
                rows: unsharded_rows,
                cols,
            });
            let shard = Trainable {
                value: shard,
                dsize: sb.orig_dsize,
                rows: shard_rows,
                cols,
            };
            sb.current.shards.push(shard);
            self.trainable.push(shard);
            self.params += elems;
            self.bytes += shard_bytes;
            return v;
        }
        let bytes = match (quantizable, self.s.quant) {
            (true, Some(q)) => q.storage_bytes(elems),
            _ => elems * self.s.dsize,
        };
        let train = !self.s.frozen;
        let v = self.g.param(bytes, train);
        self.params += elems;
        self.bytes += bytes;
        if train {
            self.trainable.push(Trainable {
                value: v,
                dsize: self.s.dsize,
                rows,
                cols,
            });
        }
        v
    }

    fn linear(&mut self, inp: u64, out: u64, bias: bool, lora_target: bool) -> Linear {
        let weight = self.tensor(out, inp, true);
        let bias = if bias {
            Some(self.tensor(out, 1, false))
        } else {
            None
        };
        let lora = if lora_target && self.s.lora_rank > 0 {
            let r = self.s.lora_rank;
            let a = self.g.param(r * inp * FP32, true);
            let b = self.g.param(out * r * FP32, true);
            self.params += r * (inp + out);
            self.bytes += r * (inp + out) * FP32;
            self.trainable.push(Trainable {
                value: a,
                dsize: FP32,
                rows: r,
                cols: inp,
            });
            self.trainable.push(Trainable {
                value: b,
                dsize: FP32,
                rows: out,
                cols: r,
            });
            Some((a, b, r))
        } else {
            None
        };
        Linear {
            weight,
            weight_dsize: self.s.dsize,
            bias,
            in_features: inp,
            out_features: out,
            lora,
            quantized: self.s.quant.is_some(),
        }
    }
}

fn lora_targets(workload: &Workload) -> Option<(u64, Vec<&str>)> {
    let lora = workload.training.lora.as_ref()?;
    if workload.mode != Mode::Training {
        return None;
    }
    let targets: Vec<&str> = if lora.target_modules.is_empty() {
        alloc::vec!["q_proj", "v_proj"]
    } else {
        lora.target_modules.iter().map(|s| s.as_str()).collect()
    };
    Some((lora.rank as u64, targets))
}

/// Builds the weights; an untied `lm_head` holds `1 / head_shards` of the
/// vocabulary (tensor parallelism).
fn build(g: &mut Graph, a: &DecoderArch, workload: &Workload, head_shards: u64) -> Weights {
    let training = workload.mode == Mode::Training;
    let lora = lora_targets(workload);
    // LoRA freezes a base in the workload's dtype; otherwise the precision decides.
    let dsize = if training && lora.is_some() {
        if workload.dtype.is_float() {
            workload.dtype.bytes()
        } else {
            BF16
        }
    } else {
        nn::param_dsize(workload)
    };
    let quant = if workload.dtype.is_float() {
        None
    } else {
        Some(workload.dtype)
    };
    let (h, v) = (a.hidden_size as u64, a.vocab_size as u64);
    let qd = a.num_heads as u64 * a.head_dim as u64;
    let kvd = a.num_kv_heads as u64 * a.head_dim as u64;
    let (rank, targets) = lora.unwrap_or((0, Vec::new()));
    let is = |name: &str| {
        targets
            .iter()
            .any(|t| *t == name || (name == "c_attn" && (*t == "q_proj" || *t == "qkv_proj")))
    };
    let parallel = &workload.parallel;
    let shards = (parallel.strategy == Strategy::Fsdp2 && training).then(|| ShardBuild {
        world: parallel.world_size as u64,
        orig_dsize: nn::param_dsize(workload),
        current: Unit::default(),
        layers: Vec::new(),
        root: Unit::default(),
    });
    let dsize = if shards.is_some() {
        parallel.param_dtype.bytes()
    } else {
        dsize
    };
    let mut b = Builder {
        shards,
        g,
        s: Storage {
            dsize,
            quant,
            frozen: rank > 0,
            lora_rank: rank,
        },
        trainable: Vec::new(),
        params: 0,
        bytes: 0,
    };
    b.g.at("load weights", None);
    let embed = b.tensor(v, h, false);
    let positions = if a.learned_positions > 0 {
        Some(b.tensor(a.learned_positions as u64, h, false))
    } else {
        None
    };
    let norm_len = match a.norm {
        NormKind::RmsNorm => 1,
        NormKind::LayerNorm => 2,
    };
    b.end_unit(false);
    let mut layers = Vec::with_capacity(a.num_layers as usize);
    for layer in 0..a.num_layers {
        // GPT-2's c_attn is one fused linear (h -> 3h) whose output q, k and
        // v are views of; it is stored in `q` (k and v then stay unused).
        let fused = a.norm == NormKind::LayerNorm;
        let q = if fused {
            b.linear(h, qd + 2 * kvd, a.qkv_bias, is("q_proj"))
        } else {
            b.linear(h, qd, a.qkv_bias, is("q_proj"))
        };
        let k = if fused {
            q
        } else {
            b.linear(h, kvd, a.qkv_bias, is("k_proj"))
        };
        let vv = if fused {
            q
        } else {
            b.linear(h, kvd, a.qkv_bias, is("v_proj"))
        };
        let o = b.linear(qd, h, a.dense_bias, is("o_proj"));
        let mlp = match (a.moe, a.mlp) {
            (Some(m), _) if layer >= m.first_dense_layers => {
                let router = b.tensor(m.num_experts as u64, h, false);
                let e = m.num_experts as u64;
                let i = m.expert_intermediate_size as u64;
                let gate_up = b.linear(h, e * 2 * i, false, false);
                let down = b.linear(i, e * h, false, false);
                let shared = if m.shared_expert_intermediate_size > 0 {
                    let si = m.shared_expert_intermediate_size as u64;
                    let sg = b.linear(h, si, false, false);
                    let su = b.linear(h, si, false, false);
                    let sd = b.linear(si, h, false, false);
                    let _shared_gate = b.tensor(1, h, false);
                    Some((sg, su, sd))
                } else {
                    None
                };
                Mlp::Moe {
                    router,
                    experts: e,
                    top_k: m.experts_per_token as u64,
                    gate_up,
                    down,
                    shared,
                }
            }
            (_, MlpKind::Gated) => {
                let i = a.intermediate_size as u64;
                Mlp::Gated {
                    gate: b.linear(h, i, a.dense_bias, is("gate_proj")),
                    up: b.linear(h, i, a.dense_bias, is("up_proj")),
                    down: b.linear(i, h, a.dense_bias, is("down_proj")),
                }
            }
            (_, MlpKind::Plain) => {
                let i = a.intermediate_size as u64;
                Mlp::Plain {
                    fc: b.linear(h, i, a.dense_bias, is("c_fc") || is("fc1")),
                    proj: b.linear(i, h, a.dense_bias, is("c_proj") || is("fc2")),
                }
            }
        };
        let norm1 = b.tensor(h * norm_len, 1, false);
        let norm2 = b.tensor(h * norm_len, 1, false);
        for _ in 0..a.extra_norms_per_layer {
            let _ = b.tensor(h * norm_len, 1, false);
        }
        b.end_unit(true);
        layers.push(Layer {
            norm1,
            q,
            k,
            v: vv,
            o,
            norm2,
            mlp,
        });
    }
    let norm = b.tensor(h * norm_len, 1, false);
    if a.learned_positions == 0 {
        // Rotary inv_freq buffer (fp32, not a parameter).
        let inv = a.head_dim as u64 / 2 * FP32;
        b.g.param(inv, false);
        b.bytes += inv;
    }
    let lm_head = if a.tie_word_embeddings {
        Linear {
            weight: embed,
            weight_dsize: dsize,
            bias: None,
            in_features: h,
            out_features: v,
            lora: None,
            quantized: false,
        }
    } else {
        let mut l = b.linear(h, v / head_shards, false, false);
        l.quantized = false;
        l
    };
    b.end_unit(false);
    let fsdp = b.shards.take().map(|sb| {
        let options = Fsdp2Options {
            world: sb.world,
            param_dsize: dsize,
            orig_dsize: sb.orig_dsize,
            reduce_dsize: parallel.reduce_dtype.bytes(),
            reshard_after_forward: parallel.reshard_after_forward,
        };
        Fsdp2::new(options, sb.root, sb.layers)
    });
    let (trainable, params, bytes) = (b.trainable, b.params, b.bytes);
    Weights {
        fsdp,
        embed,
        positions,
        layers,
        norm,
        lm_head,
        trainable,
        params,
        bytes,
    }
}

/// One layer's cache: keys and values storage and the tokens kept.
#[derive(Clone, Copy)]
struct CachedLayer {
    keys: Value,
    values: Value,
    /// Tokens the next `torch.cat` starts from (for a sliding layer the last
    /// `window - 1`, a view that keeps the whole cat output alive).
    kept: u64,
}

/// The generation cache (`DynamicCache`).
struct KvCache {
    layers: Vec<CachedLayer>,
    dtype: Dtype,
}

impl KvCache {
    fn kept(&self, l: usize) -> u64 {
        self.layers.get(l).map_or(0, |c| c.kept)
    }

    /// `update`: cat onto the kept tokens (keys, then values, each replacing
    /// the old storage). Returns the new keys/values and their length.
    fn update(
        &mut self,
        g: &mut Graph,
        l: usize,
        new_tokens: u64,
        per_token_elems: u64,
        window: Option<u32>,
        new: Option<(Value, Value)>,
    ) -> (Value, Value, u64, u64) {
        let total = self.kept(l) + new_tokens;
        let elems = per_token_elems * total;
        let bytes = self.dtype.storage_bytes(elems);
        let old = self.layers.get(l).copied();
        // In training the cat is on the autograd tape: gradients reach the
        // new keys and values through it.
        let (k_in, v_in): (&[Value], &[Value]) = match &new {
            Some((k, v)) => (core::slice::from_ref(k), core::slice::from_ref(v)),
            None => (&[], &[]),
        };
        let keys = g.op(
            "KV cache: keys cat",
            k_in,
            bytes,
            Component::KvCache,
            Saves::NOTHING,
        );
        if let Some(o) = old {
            g.drop(o.keys);
        }
        let values = g.op(
            "KV cache: values cat",
            v_in,
            bytes,
            Component::KvCache,
            Saves::NOTHING,
        );
        if let Some(o) = old {
            g.drop(o.values);
        }
        let kept = match window {
            Some(w) => total.min(w.saturating_sub(1) as u64),
            None => total,
        };
        let entry = CachedLayer { keys, values, kept };
        if l < self.layers.len() {
            self.layers[l] = entry;
        } else {
            self.layers.push(entry);
        }
        (keys, values, total, elems)
    }
}

/// One forward call: `tokens` new positions after `past` cached ones.
struct Call {
    batch: u64,
    tokens: u64,
    logits: Logits,
    checkpointing: bool,
    gpt2_dropout: bool,
    /// A decode step of `generate`: transformers switches mixture-of-experts
    /// layers to `batched_mm` for it (`_optimize_model_for_decode`).
    decode: bool,
    /// A call of `generate` (prefill or decode): it passes an attention mask
    /// and per-sequence `position_ids` of shape (batch, tokens), so position
    /// tables are per sequence and eager masks combine causal and padding.
    generate: bool,
}

struct Model<'a> {
    a: &'a DecoderArch,
    w: Weights,
    /// FSDP2's units and buffers in flight (the forward's hooks and the
    /// backward's update them).
    fsdp: Option<RefCell<Fsdp2>>,
    /// Tensor parallelism: ranks whose vocabulary shards of an untied
    /// `lm_head` are all-gathered into full logits (1: none).
    gathered_logits: u64,
    attention: Attention,
    /// [`super::ReplayOptions::decode_shortcut`].
    decode_shortcut: bool,
}

impl Model<'_> {
    fn norm(&self, g: &mut Graph, cx: &Ctx, x: T, weight: Value, name: &'static str) -> T {
        let h = self.a.hidden_size as u64;
        match self.a.norm {
            NormKind::RmsNorm => nn::rms_norm(g, x, weight, self.w_dsize(cx), h, name),
            NormKind::LayerNorm => nn::layer_norm(g, cx, x, weight, h, name),
        }
    }

    fn w_dsize(&self, _cx: &Ctx) -> u64 {
        self.w.lm_head.weight_dsize
    }

    /// One decoder layer; `x` is held by the caller.
    #[allow(clippy::too_many_arguments)]
    fn layer(
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
                    }
                } else {
                    nn::EagerSoftmax {
                        fp32: true,
                        dropout: false,
                        dropout_before_cast: false,
                        half_to_float: cx.fp16,
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

    /// A decode step (one token per sequence) whose per-layer transients all
    /// fit the small pool (<= 1 MiB) while each layer's keys and values are
    /// large-pool blocks: the two pools never share blocks, so layers 1..N
    /// leave the small pool exactly as layer 0 did and only their KV-cache
    /// cats change the large pool. Tested against the full replay in
    /// `decode_shortcut_matches_full_replay`.
    fn decode_shortcut(&self, call: &Call, cache: &Option<KvCache>) -> bool {
        let Some(c) = cache else { return false };
        if call.tokens != 1
            || c.layers.len() != self.a.num_layers as usize
            || !c.dtype.is_float()
            || !self.decode_shortcut
        {
            return false;
        }
        let a = self.a;
        if a.moe.is_some() {
            // Decode runs the experts as `batched_mm`: gigabyte copies of
            // the chosen experts' weights share the large pool with the
            // cache, so every layer is replayed.
            return false;
        }
        let widest = [a.hidden_size, a.intermediate_size, a.num_heads * a.head_dim]
            .into_iter()
            .max()
            .unwrap_or(0) as u64;
        let transient = call.batch * widest * FP32;
        let shortest = c.layers.iter().map(|l| l.kept).min().unwrap_or(0);
        let kv = c
            .dtype
            .storage_bytes(call.batch * a.num_kv_heads as u64 * shortest * a.head_dim as u64);
        transient <= crate::allocator::SMALL_SIZE && kv > crate::allocator::SMALL_SIZE
    }

    /// The KV-cache update of layer `l` alone (`torch.cat` of keys, then values).
    fn kv_cat(&self, g: &mut Graph, l: usize, call: &Call, cache: &mut Option<KvCache>) {
        let Some(c) = cache.as_mut() else { return };
        let a = self.a;
        g.at("attention: KV cache update (torch.cat)", Some(l as u32));
        c.update(
            g,
            l,
            call.tokens,
            call.batch * a.num_kv_heads as u64 * a.head_dim as u64,
            a.layer_sliding_window(l as u32),
            None,
        );
    }

    fn mlp(
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
                        quantized: false,
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
                        let gated = nn::unary(g, d, "moe: shared expert * sigmoid gate", d.dsize);
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

    /// The experts of a decode step, as `generate` runs them on a GPU
    /// (`batched_mm_experts_forward`, `integrations/moe.py`): each token
    /// repeated once per chosen expert (`S = tokens x top_k` rows), then
    /// the chosen experts' gate/up weights gathered per row
    /// (`gate_up_proj[expert_ids]`: S copies of an expert's weights), a
    /// batched GEMM, the gated activation, the down weights gathered the
    /// same way (allocated before the gate/up copies are released, so both
    /// are live together), the down GEMM, the routing weights (fp32) and a
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
        let weighted = op(g, "moe: * routing weights (fp32)", &[d], pairs * h * FP32);
        let summed = T {
            v: op(g, "moe: sum over top-k", &[weighted], tokens * h * FP32),
            elems: tokens * h,
            dsize: FP32,
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
    /// down projection (and its `masked_fill`), the routing weights (fp32),
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
        let gathered = g.op(
            "moe: gather tokens by expert",
            &[x.v],
            pairs * h * x.dsize,
            Component::Transient,
            Saves::inputs(&[x.v]),
        );
        g.drop(div);
        let gathered = T {
            v: gathered,
            elems: pairs * h,
            dsize: x.dsize,
        };
        small(g, "moe: routing weights by expert", pairs * FP32);
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
        let weighted = nn::unary(g, d_masked, "moe: * routing weights (fp32)", FP32);
        small(g, "moe: inverse permutation", pairs * INT64);
        g.at("moe: arange", layer);
        let arange = g.input(pairs * INT64, Component::Transient);
        g.drop(arange);
        let restored = nn::unary(g, weighted, "moe: restore token order", FP32);
        g.drop(weighted.v);
        let summed = g.op(
            "moe: sum over top-k",
            &[restored.v],
            tokens * h * FP32,
            Component::Transient,
            Saves::NOTHING,
        );
        let summed = T {
            v: summed,
            elems: tokens * h,
            dsize: FP32,
        };
        let out = nn::cast(g, summed, x.dsize, "moe: .to(hidden dtype)");
        g.drop_all(&[summed.v, restored.v, d_masked.v, gathered.v]);
        g.drop_all(&locals);
        out
    }

    /// A full model call. Returns logits (or the final hidden states).
    fn forward(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        call: &Call,
        cache: &mut Option<KvCache>,
        kept: &mut Option<(T, T)>,
        kept_mask: &mut Option<T>,
    ) -> T {
        let a = self.a;
        let (b, s, h) = (call.batch, call.tokens, a.hidden_size as u64);
        let rows = b * s;
        if let Some(f) = &self.fsdp {
            f.borrow_mut().root_pre_forward(g);
        }
        g.at("embedding", None);
        let ids = g.input(rows * INT64, Component::Activations);
        let emb_dsize = self.w.lm_head.weight_dsize;
        let mut x = {
            let v = g.op(
                "embedding",
                &[ids, self.w.embed],
                rows * h * emb_dsize,
                Component::Activations,
                Saves::inputs(&[ids]),
            );
            nn::embedding_backward_scratch(g, v, rows, a.vocab_size as u64, h);
            T {
                v,
                elems: rows * h,
                dsize: emb_dsize,
            }
        };
        // The embedding outputs the model's forward keeps in locals until it
        // returns (after the final norm): Llama's `inputs_embeds` (the
        // hidden states entering the first layer); GPT-2's `inputs_embeds`
        // and `position_embeds`, whose sum (and its dropout) is passed on
        // (the H200 trace of GPT-2 training frees the 48 MiB `wte` output
        // right after `ln_f`, `trace-segments-5b.jsonl`).
        let mut embedding_locals: Vec<Value> = Vec::new();
        // `position_ids`: (1, s) in a plain call, (b, s) under `generate`.
        let positions = if call.generate { rows } else { s };
        if let Some(p) = self.w.positions {
            let pe = g.op(
                "position embedding",
                &[p],
                positions * h * emb_dsize,
                Component::Transient,
                Saves::NOTHING,
            );
            let sum = nn::add(
                g,
                x,
                T {
                    v: pe,
                    elems: positions * h,
                    dsize: emb_dsize,
                },
                "embedding + positions",
            );
            embedding_locals.extend([x.v, pe]);
            x = sum;
            if call.gpt2_dropout {
                let d = nn::dropout(g, x, "embedding dropout");
                g.drop(x.v);
                x = d;
            }
        }
        g.drop(ids);
        if call.checkpointing {
            // gradient_checkpointing_enable() calls enable_input_require_grads().
            g.set_requires_grad(x.v);
        }
        if embedding_locals.is_empty() {
            g.hold(x.v);
            embedding_locals.push(x.v);
        }
        // Eager attention adds an explicit (b, 1, s, s) causal mask in the
        // activations' dtype, built once per call, before the rotary tables:
        // `masking_utils` first evaluates the causal mask function as a
        // (1, 1, s, s) boolean, then `eager_mask` turns it into the additive
        // mask and the boolean is freed (the H200 traces: 16 MiB then 32 MiB
        // for Llama-3.1-8B b1 L4096; 1 MiB then 8 MiB for Llama-3.2-1B b4
        // L1024).
        // Under `generate` the mask function is `and_masks(causal, padding)`:
        // a second (1, 1, s, s) boolean, then the (b, 1, s, s) combination,
        // which lives until the additive mask exists (the H200 trace of
        // GPT-2 eager generation b4 L1008: 1,016,064 B twice, 4,064,256 B,
        // then the 8,128,512 B mask).
        let eager_mask = if self.attention == Attention::Eager && s > 1 {
            g.at("eager causal mask", None);
            let mut boolean = g.input(s * s, Component::Transient);
            if call.generate {
                let padded = g.input(s * s, Component::Transient);
                g.drop(boolean);
                boolean = g.input(b * s * s, Component::Transient);
                g.drop(padded);
            }
            let elems = b * s * s;
            let mask = T {
                v: g.input(elems * x.dsize, Component::Transient),
                elems,
                dsize: x.dsize,
            };
            g.drop(boolean);
            Some(mask)
        } else {
            None
        };
        // Rotary cos/sin for the positions of this call, computed in fp32 and
        // cast to the hidden states' dtype.
        let rope = if a.learned_positions == 0 {
            g.at("rotary embedding cos/sin", None);
            let hd = a.head_dim as u64;
            Some(nn::rotary_tables(g, positions, hd, x.dsize))
        } else {
            None
        };
        // Sliding-window layers get an explicit boolean mask (b, 1, s, s),
        // built once per call and kept for every layer.
        let sliding_mask =
            if s > 1 && (0..a.num_layers).any(|l| a.layer_sliding_window(l).is_some()) {
                g.at("sliding-window attention mask", None);
                Some(g.input(b * s * s, Component::Transient))
            } else {
                None
            };
        let decode_shortcut = self.decode_shortcut(call, cache);
        for l in 0..a.num_layers as usize {
            if decode_shortcut && l > 0 {
                // Same small-pool transients as layer 0, reusing the same cached
                // blocks; only the large-pool KV-cache cat differs per layer.
                self.kv_cat(g, l, call, cache);
                continue;
            }
            if let Some(f) = &self.fsdp {
                f.borrow_mut().pre_forward(g, l);
            }
            let out = if call.checkpointing {
                // Non-reentrant checkpoint: run without saving; the boundary keeps the input.
                let grad = g.grad_mode;
                g.grad_mode = false;
                let cached = cx.cache_weight_casts;
                cx.cache_weight_casts = false;
                let o = self.layer(g, cx, l, x, call, rope, cache, eager_mask);
                cx.cache_weight_casts = cached;
                g.grad_mode = grad;
                g.checkpoint(l as u32, x.v, o.v);
                o
            } else {
                self.layer(g, cx, l, x, call, rope, cache, eager_mask)
            };
            if let Some(f) = &self.fsdp {
                f.borrow_mut().post_forward(g, l);
            }
            g.drop(x.v);
            x = out;
        }
        if let Some(m) = sliding_mask {
            g.drop(m);
        }
        if let Some(m) = eager_mask {
            if call.checkpointing {
                *kept_mask = Some(m);
            } else {
                g.drop(m.v);
            }
        }
        g.at("final norm", None);
        let hn = self.norm(g, cx, x, self.w.norm, "final norm");
        g.drop(x.v);
        g.drop_all(&embedding_locals);
        if let Some((cos, sin)) = rope {
            if call.checkpointing {
                // The checkpoints hold the position embeddings until their recompute.
                *kept = Some((cos, sin));
            } else {
                g.drop_all(&[cos.v, sin.v]);
            }
        }
        let out = match call.logits {
            Logits::None => return hn,
            Logits::Last => {
                let last = g.op(
                    "lm_head input: last position",
                    &[hn.v],
                    b * h * hn.dsize,
                    Component::Transient,
                    Saves::NOTHING,
                );
                let last = T {
                    v: last,
                    elems: b * h,
                    dsize: hn.dsize,
                };
                g.at("lm_head (last position)", None);
                let lg = nn::linear(g, cx, last, &self.w.lm_head, "lm_head");
                g.drop(last.v);
                lg
            }
            Logits::All => {
                g.at("lm_head (all positions)", None);
                nn::linear(g, cx, hn, &self.w.lm_head, "lm_head")
            }
        };
        let out = if self.gathered_logits > 1 {
            // `colwise_gather_output`: every rank's vocabulary shard
            // gathered along dim 0 into a new buffer, then concatenated
            // along the vocabulary.
            let ranks = self.gathered_logits;
            g.at("tensor parallel: all-gather logits", None);
            let bytes = out.elems * ranks * out.dsize;
            let stacked = g.op(
                "all_gather_tensor",
                &[out.v],
                bytes,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(out.v);
            let full = g.op(
                "cat(chunk(gathered))",
                &[stacked],
                bytes,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(stacked);
            T {
                v: full,
                elems: out.elems * ranks,
                dsize: out.dsize,
            }
        } else {
            out
        };
        g.drop(hn.v);
        if a.final_logit_softcapping {
            // logits = tanh(logits / cap) * cap
            g.at("final logit softcapping", None);
            let scaled = nn::unary(g, out, "logits / softcap", out.dsize);
            g.drop(out.v);
            let th = nn::tanh(g, scaled, "tanh(logits / softcap)");
            g.drop(scaled.v);
            let capped = nn::unary(g, th, "* softcap", th.dsize);
            g.drop(th.v);
            return capped;
        }
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

/// Replays a decoder run.
pub fn replay(
    a: &DecoderArch,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
    options: super::ReplayOptions,
) -> Result<ReplaySummary, Error> {
    let mut g = Graph::for_runtime(replay, runtime);
    // Tensor parallelism (`tp_plan="auto"`): q, k, v, gate and up split by
    // output rows, o and down by input columns, each rank computing its
    // share of the heads and of the MLP; the embedding and norms
    // replicated; the row-split outputs all-reduced in place.
    let ranks = match workload.parallel.strategy {
        Strategy::Tp => workload.parallel.world_size,
        _ => 1,
    };
    let rank_arch = DecoderArch {
        num_heads: a.num_heads / ranks,
        num_kv_heads: a.num_kv_heads / ranks,
        intermediate_size: a.intermediate_size / ranks,
        ..a.clone()
    };
    let a = &rank_arch;
    let gathered_logits = if a.tie_word_embeddings {
        1
    } else {
        ranks as u64
    };
    if workload.load == LoadPath::BuildThenCast
        && workload.mode == Mode::Inference
        && workload.dtype.is_float()
        && workload.dtype != Dtype::Fp32
    {
        // Constructed on the GPU in fp32, then `model.to(dtype)`.
        let mut scratch_replay = Replay::new(runtime.allocator, None);
        let mut scratch = Graph::new(&mut scratch_replay);
        scratch.record_params();
        let mut fp32 = workload.clone();
        fp32.dtype = Dtype::Fp32;
        build(&mut scratch, a, &fp32, gathered_logits);
        let sizes = scratch.recorded_params();
        g.stage_fp32_construction(&sizes);
    }
    let mut w = build(&mut g, a, workload, gathered_logits);
    let summary = ReplaySummary {
        params: w.params,
        weight_bytes: w.bytes,
        ..ReplaySummary::default()
    };
    super::cublas_workspaces(&mut g, runtime, workload.mode == Mode::Training);
    let gpt2 = a.norm == NormKind::LayerNorm;
    let fsdp = w.fsdp.take().map(RefCell::new);
    let model = Model {
        a,
        w,
        fsdp,
        gathered_logits,
        attention: workload.attention,
        decode_shortcut: options.decode_shortcut,
    };
    let b = workload.batch as u64;
    let s = workload.seq_len as u64;
    match workload.mode {
        Mode::Inference => {
            let dsize = if workload.dtype.is_float() {
                workload.dtype.bytes()
            } else {
                BF16
            };
            let mut cx = Ctx::plain(dsize);
            cx.fp16 = workload.dtype == crate::arch::Dtype::Fp16;
            match workload.inference.kind {
                InferenceKind::Forward => {
                    let call = Call {
                        batch: b,
                        tokens: s,
                        logits: workload.inference.logits,
                        checkpointing: false,
                        gpt2_dropout: false,
                        decode: false,
                        generate: false,
                    };
                    let mut cache = None;
                    let out =
                        model.forward(&mut g, &mut cx, &call, &mut cache, &mut None, &mut None);
                    g.drop(out.v);
                }
                InferenceKind::Generate => generate(&mut g, &model, &mut cx, workload, b, s),
            }
        }
        Mode::Training => train(&mut g, &model, workload, b, s, gpt2),
    }
    Ok(summary)
}

fn generate(g: &mut Graph, model: &Model, cx: &mut Ctx, workload: &Workload, b: u64, s: u64) {
    let kv_dtype = workload
        .inference
        .kv_dtype
        .unwrap_or(if workload.dtype.is_float() {
            workload.dtype
        } else {
            Dtype::Bf16
        });
    let mut cache = Some(KvCache {
        layers: Vec::new(),
        dtype: kv_dtype,
    });
    let v = model.a.vocab_size as u64;
    let new_tokens = workload.inference.new_tokens.max(1) as u64;
    let mut ids = g.input(b * s * INT64, Component::Activations);
    let mut tokens = s;
    for step in 0..new_tokens {
        g.replay.step(None);
        let call = Call {
            batch: b,
            tokens: if step == 0 { s } else { 1 },
            logits: workload.inference.logits,
            checkpointing: false,
            gpt2_dropout: false,
            decode: step > 0,
            generate: true,
        };
        let logits = model.forward(g, cx, &call, &mut cache, &mut None, &mut None);
        g.at("generate: next-token logits to fp32", None);
        let next = g.op(
            "generate: logits[:, -1].float()",
            &[logits.v],
            b * v * FP32,
            Component::Transient,
            Saves::NOTHING,
        );
        g.drop(logits.v);
        g.drop(next);
        if step + 1 == new_tokens {
            break;
        }
        tokens += 1;
        let new_ids = g.input(b * tokens * INT64, Component::Activations);
        g.drop(ids);
        ids = new_ids;
    }
    g.drop(ids);
}

fn train(g: &mut Graph, model: &Model, workload: &Workload, b: u64, s: u64, gpt2: bool) {
    let t = &workload.training;
    let parallel = &workload.parallel;
    let mut state = OptimizerState::default();
    // DDP (and ZeRO-1, which runs on DDP): the reducer's buckets; ZeRO-1
    // updates only this rank's partition of the parameters.
    let data_parallel = matches!(parallel.strategy, Strategy::Ddp | Strategy::Zero1);
    let optimized = match parallel.strategy {
        Strategy::Zero1 => {
            sharding::zero1_partition(&model.w.trainable, parallel.world_size as u64)
        }
        _ => model.w.trainable.clone(),
    };
    let mut buckets = if data_parallel {
        g.leaf_grads_copied_out = parallel.gradient_as_bucket_view;
        sharding::ddp_initial_bucket(g, &model.w.trainable)
    } else {
        Vec::new()
    };
    if t.optimizer_state_resident {
        optim::preallocate(g, t.optimizer, &optimized, &mut state);
    }
    for step in 0..t.steps {
        g.replay.step(Some(step));
        if data_parallel && step == 1 {
            // The reducer rebuilds its buckets at the second forward: the
            // new ones are allocated before the old one is released.
            let rebuilt = sharding::ddp_buckets(
                g,
                &model.w.trainable,
                parallel.bucket_cap_mb as u64 * (1 << 20),
            );
            g.replay.free_all(core::mem::replace(&mut buckets, rebuilt));
        }
        g.grad_mode = true;
        let mut cx = match (t.precision, t.lora.is_some()) {
            _ if model.fsdp.is_some() => Ctx::plain(parallel.param_dtype.bytes()),
            (Precision::AmpBf16, false) => Ctx::amp(),
            (Precision::Fp32, false) => Ctx::plain(FP32),
            _ => Ctx::plain(BF16),
        };
        let call = Call {
            batch: b,
            tokens: s,
            logits: Logits::All,
            checkpointing: t.grad_checkpointing,
            gpt2_dropout: gpt2,
            decode: false,
            generate: false,
        };
        let mut rope = None;
        let mut no_cache = None;
        // `use_cache=True` (the config default): the forward fills a
        // DynamicCache that the returned outputs hold until they are dropped.
        // transformers turns the cache off under gradient checkpointing.
        let mut train_cache = if t.use_cache && !t.grad_checkpointing {
            Some(KvCache {
                layers: Vec::new(),
                dtype: if cx.autocast || cx.compute_dsize == BF16 {
                    Dtype::Bf16
                } else {
                    Dtype::Fp32
                },
            })
        } else {
            None
        };
        let mut mask = None;
        let logits = model.forward(g, &mut cx, &call, &mut train_cache, &mut rope, &mut mask);
        g.at("loss: cross entropy over all tokens", None);
        let loss = nn::causal_lm_loss(g, logits, b * s);
        // FSDP2's root post-forward runs as `model.forward` returns, after
        // the loss: the last layer's all-gather output goes.
        if let Some(f) = &model.fsdp {
            f.borrow_mut().root_post_forward(g);
        }
        g.drop(logits.v);
        // `loss = model(...).loss`: the outputs, and the cache they hold,
        // go as soon as the loss is taken (autograd keeps what it saved).
        if let Some(c) = train_cache.take() {
            for l in c.layers {
                g.drop_all(&[l.keys, l.values]);
            }
        }
        cx.exit_autocast(g);
        g.at("backward", None);
        let mut recompute = |g: &mut Graph, segment: u32, input: Value| {
            // Recompute the layer with saving, then backward through it.
            let x = T {
                v: input,
                elems: b * s * model.a.hidden_size as u64,
                dsize: layer_input_dsize(&cx, model),
            };
            g.at("backward: recompute checkpointed layer", Some(segment));
            cx.cache_weight_casts = false;
            model
                .layer(
                    g,
                    &mut cx,
                    segment as usize,
                    x,
                    &call,
                    rope,
                    &mut no_cache,
                    mask,
                )
                .v
        };
        match &model.fsdp {
            None => g.backward_recomputing(loss.v, &mut recompute),
            Some(f) => {
                // FSDP2's hooks: the root's pre-backward prefetches the last
                // layer; each layer is gathered as backward reaches it and
                // its gradients reduced as backward leaves it; the root's
                // reduction runs in the engine's final callback.
                g.backward_with_units(loss.v, Some(&mut recompute), &mut |g, event| {
                    let mut f = f.borrow_mut();
                    match event {
                        UnitEvent::Start => f.root_pre_backward(g),
                        UnitEvent::Enter(l) => f.pre_backward(g, l as usize),
                        UnitEvent::Leave(l) => f.post_backward(g, UnitId::Layer(l as usize)),
                        UnitEvent::End => f.end_backward(g),
                    }
                });
            }
        }
        if let Some((cos, sin)) = rope {
            g.drop_all(&[cos.v, sin.v]);
        }
        if let Some(m) = mask {
            g.drop(m.v);
        }
        g.drop(loss.v);
        g.grad_mode = false;
        g.at("optimizer step", None);
        optim::step(g, t.optimizer, &optimized, &mut state);
        g.at("zero_grad(set_to_none=True)", None);
        g.zero_grad();
    }
}

/// Element size of the residual stream between layers.
fn layer_input_dsize(cx: &Ctx, model: &Model) -> u64 {
    if cx.autocast {
        model.w.lm_head.weight_dsize.max(FP32)
    } else {
        cx.compute_dsize
    }
}
