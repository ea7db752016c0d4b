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
//!
//! This file holds the model's types and the replay's entry point
//! ([`replay`]) with the forward call; `weights.rs` creates the weights,
//! `layer.rs` runs one decoder layer, `mlp.rs` its MLP (dense or
//! mixture-of-experts), `generation.rs` the KV cache and `generate`,
//! `training.rs` the training steps.

use super::nn::{self, Ctx, Linear, BF16, FP32, INT64, T};
use super::optim::Trainable;
use super::sharding::Fsdp2;
use super::ReplaySummary;
use crate::arch::{DecoderArch, Dtype, NormKind};
use crate::component::Component;
use crate::error::Error;
use crate::graph::{Graph, Saves, Value};
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Attention, Head, InferenceKind, LoadPath, Logits, Mode, Workload};
use alloc::vec::Vec;
use core::cell::RefCell;

mod generation;
mod layer;
mod mlp;
mod training;
mod weights;

/// Most decode steps times layers a generation may replay: 2^25, one
/// million new tokens through 32 layers, about half a minute on two cores
/// (every decode step replays its KV-cache updates in every layer; GPT-2's
/// 12 layers take 11.8 s for a million tokens).
pub const MAX_DECODE_LAYER_STEPS: u64 = 1 << 25;

/// Whether peft adapts default modules of this model when LoRA names none
/// (it has none for Phi-3, whose `target_modules` must be given).
pub fn has_peft_default_targets(a: &DecoderArch) -> bool {
    weights::default_lora_targets(a).is_some()
}

/// Rejects workloads the decoder family cannot run, and LoRA targets that
/// name no module of the model.
pub fn validate(a: &DecoderArch, workload: &Workload) -> Result<(), Error> {
    weights::validate_lora_targets(a, workload)?;
    if workload.head != Head::Lm {
        if workload.mode == Mode::Inference && workload.inference.kind == InferenceKind::Generate {
            return Err(Error::invalid(
                "workload.inference.kind",
                "a sequence classifier does not generate",
                "\"forward\" with workload.head \"sequence_classification\"",
            ));
        }
        if workload.parallel.strategy != Strategy::None {
            return Err(Error::invalid(
                "workload.head",
                "a sequence classifier is modelled on one GPU",
                "\"lm\" with workload.parallel, or no workload.parallel",
            ));
        }
    }
    if workload.padded && (a.sliding_window > 0 || a.fused_projections) {
        return Err(Error::invalid(
            "workload.padded",
            "padded batches are not modelled for decoders with sliding windows or fused projections (Gemma 2, Phi-3)",
            "false, or a decoder without them (Llama, Mistral v0.3, Qwen2, Mixtral, GPT-2)",
        ));
    }
    let decode_layer_steps = u64::from(workload.inference.new_tokens) * u64::from(a.num_layers);
    if workload.mode == Mode::Inference
        && workload.inference.kind == InferenceKind::Generate
        && decode_layer_steps > MAX_DECODE_LAYER_STEPS
    {
        return Err(Error::invalid(
            "workload.inference.new_tokens",
            alloc::format!(
                "{} decode steps through {} layers would take minutes to replay",
                workload.inference.new_tokens,
                a.num_layers
            ),
            &alloc::format!(
                "new_tokens x layers up to {MAX_DECODE_LAYER_STEPS} (here up to {} new tokens)",
                MAX_DECODE_LAYER_STEPS / u64::from(a.num_layers.max(1))
            ),
        ));
    }
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
    /// Phi-3's `gate_up_proj`: gate and up are the halves of one output.
    GatedFused {
        gate_up: Linear,
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
    /// Qwen3's RMSNorms over each head's queries and keys.
    qk_norms: Option<(Value, Value)>,
    norm2: Value,
    /// Gemma 2's norms of the attention's and of the MLP's output, each
    /// before its residual sum.
    sandwich_norms: Option<(Value, Value)>,
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
    /// Linear weights quantised by bitsandbytes (int8/int4).
    quant: Option<nn::bnb::Scheme>,
    /// Base weights frozen (LoRA).
    frozen: bool,
    /// LoRA rank and target mask, when adapters are attached.
    lora_rank: u64,
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
    /// [`Workload::padded`]: every call gets a padding mask.
    padded: bool,
    /// A sequence classifier's labels (`workload.head`): `score` over
    /// every position, then each sequence's last non-padding token.
    classify: Option<u64>,
}

impl Model<'_> {
    fn norm(&self, g: &mut Graph, cx: &Ctx, x: T, weight: Value, name: &'static str) -> T {
        let h = self.a.hidden_size as u64;
        match self.a.norm {
            NormKind::RmsNorm => nn::rms_norm(g, x, weight, self.w_dsize(cx), h, name),
            NormKind::GemmaRmsNorm => nn::gemma_rms_norm(g, x, weight, self.w_dsize(cx), h, name),
            NormKind::LayerNorm => nn::layer_norm(g, cx, x, weight, h, name),
        }
    }

    /// Keys a sliding-window layer attends to in this call (its kept
    /// tokens plus the new ones), or `None` when no layer slides.
    fn sliding_kv_len(&self, call: &Call, cache: &Option<KvCache>) -> Option<u64> {
        let a = self.a;
        let sliding = (0..a.num_layers).find(|&l| a.layer_sliding_window(l).is_some())?;
        let kept = cache
            .as_ref()
            .and_then(|c| c.layers.get(sliding as usize))
            .map_or(0, |c| c.kept);
        Some(kept + call.tokens)
    }

    fn w_dsize(&self, _cx: &Ctx) -> u64 {
        self.w.lm_head.weight_dsize
    }

    /// A full model call. Returns logits (or the final hidden states) and
    /// the final norm's output when the caller must release it
    /// ([`Outputs::last_hidden`]).
    fn forward(
        &self,
        g: &mut Graph,
        cx: &mut Ctx,
        call: &Call,
        cache: &mut Option<KvCache>,
        kept: &mut Option<(T, T)>,
        kept_masks: &mut Vec<T>,
    ) -> Outputs {
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
            if a.scaled_embeddings {
                // `super().forward(input_ids) * self.embed_scale`: the lookup
                // is a temporary of the product.
                let scaled = g.op(
                    "embedding * sqrt(hidden_size)",
                    &[v],
                    rows * h * emb_dsize,
                    Component::Activations,
                    Saves::NOTHING,
                );
                g.drop(v);
                T {
                    v: scaled,
                    elems: rows * h,
                    dsize: emb_dsize,
                }
            } else {
                T {
                    v,
                    elems: rows * h,
                    dsize: emb_dsize,
                }
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
        // The call's mask (`call_mask`, kept through backward for a
        // checkpoint's recompute): eager attention's additive mask, or a
        // padded batch's boolean one for SDPA.
        // Eager attention adds an explicit (b, 1, s, s) causal mask in the
        // activations' dtype, built once per call, before the rotary tables:
        // `masking_utils` first evaluates the causal mask function as a
        // (1, 1, s, s) boolean, then `eager_mask` turns it into the additive
        // mask and the boolean is freed (the H200 traces: 16 MiB then 32 MiB
        // for Llama-3.1-8B b1 L4096; 1 MiB then 8 MiB for Llama-3.2-1B b4
        // L1024).
        // Under `generate` or with a padded batch the mask function is
        // `and_masks(causal, padding)`:
        // a second (1, 1, s, s) boolean, then the (b, 1, s, s) combination,
        // which lives until the additive mask exists (the H200 trace of
        // GPT-2 eager generation b4 L1008: 1,016,064 B twice, 4,064,256 B,
        // then the 8,128,512 B mask).
        //
        // A model with sliding-window layers gets a second mask, built the
        // same way through `and_masks(causal, sliding_window)` outside
        // generation: the window's (1, 1, s, s) boolean, their combination,
        // the causal one, a second combination, then the additive mask (the
        // H200 trace of Gemma-2-9B eager LoRA b4 L2048, `measurements/
        // h200-generalization/trace-segments-30.jsonl.gz`, events 6 to 14:
        // 4 MiB booleans, then the 32 MiB mask). Gemma 2's global layers
        // take the causal mask, its sliding ones this one; a model whose
        // layers all slide (Phi-3) builds only this one. Both live as long.
        // `eager_mask`'s additive (b, 1, s, s) mask in the activations' dtype.
        let dsize = x.dsize;
        let additive_mask = |g: &mut Graph| T {
            v: g.input(b * s * s * dsize, Component::Transient),
            elems: b * s * s,
            dsize,
        };
        let sliding_layers = (0..a.num_layers).any(|l| a.layer_sliding_window(l).is_some());
        let global_layers = (0..a.num_layers).any(|l| a.layer_sliding_window(l).is_none());
        let eager_masks = self.attention == Attention::Eager && s > 1;
        let sliding_and_mask = eager_masks && sliding_layers && !call.generate && !self.padded;
        let call_mask = if eager_masks && (global_layers || !sliding_and_mask) {
            g.at("eager causal mask", None);
            let mut boolean = g.input(s * s, Component::Transient);
            if call.generate || self.padded {
                let padded = g.input(s * s, Component::Transient);
                g.drop(boolean);
                boolean = g.input(b * s * s, Component::Transient);
                g.drop(padded);
            }
            let mask = additive_mask(g);
            g.drop(boolean);
            Some(mask)
        } else if sliding_and_mask {
            None
        } else if self.padded && self.attention == Attention::Sdpa {
            // A mask with zeros reaches SDPA: `sdpa_mask` evaluates the
            // causal (1, 1, q, kv) boolean, the padding one, then their
            // (b, 1, q, kv) combination, kept for the whole call (the H200
            // trace of Llama-3.2-1B b8 L4096, `measurements/padding/`:
            // 16 MiB twice, one freed, the 128 MiB mask, the other freed).
            g.at("padding mask", None);
            let kv = s + cache
                .as_ref()
                .and_then(|c| c.layers.first())
                .map_or(0, |l| l.kept);
            let causal = g.input(s * kv, Component::Transient);
            let padding = g.input(s * kv, Component::Transient);
            g.drop(causal);
            let combined = g.input(b * s * kv, Component::Transient);
            g.drop(padding);
            Some(T {
                v: combined,
                elems: b * s * kv,
                dsize: 1,
            })
        } else {
            None
        };
        let sliding_eager_mask = sliding_and_mask.then(|| {
            g.at("eager sliding-window mask", None);
            let window = g.input(s * s, Component::Transient);
            let first = g.input(s * s, Component::Transient);
            g.drop(window);
            let causal = g.input(s * s, Component::Transient);
            let second = g.input(s * s, Component::Transient);
            g.drop_all(&[causal, first]);
            let mask = additive_mask(g);
            g.drop(second);
            mask
        });
        // The layers see one of the masks (the same shape either way).
        let (call_mask, second_mask) = match (call_mask, sliding_eager_mask) {
            (None, sliding) => (sliding, None),
            (causal, sliding) => (causal, sliding),
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
        // Under SDPA, sliding-window layers get an explicit boolean mask
        // (b, 1, s, kv), built once per call and kept for every layer, once
        // their keys reach the window (`sliding_window_mask_needed`); before
        // that `sdpa_mask` returns none and SDPA runs causal. (Eager
        // attention has its own, above.)
        let sliding_mask = match self.sliding_kv_len(call, cache) {
            _ if sliding_and_mask => None,
            Some(kv) if nn::sliding_window_mask_needed(a.sliding_window as u64, kv) => {
                g.at("sliding-window attention mask", None);
                Some(g.input(b * s * kv, Component::Transient))
            }
            _ => None,
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
                // Non-reentrant checkpoint: the layer saves placeholders
                // (counted for the recompute's early stop); the boundary
                // keeps the input, and autocast caches the weight casts as
                // it would outside a checkpoint.
                g.begin_checkpoint();
                let o = self.layer(g, cx, l, x, call, rope, cache, call_mask);
                g.checkpoint(l as u32, x.v, o.v);
                o
            } else {
                self.layer(g, cx, l, x, call, rope, cache, call_mask)
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
        for m in [call_mask, second_mask].into_iter().flatten() {
            if call.checkpointing {
                // The recompute reads them: kept until backward ends.
                kept_masks.push(m);
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
        if self.classify.is_some() {
            return self.classify_last_tokens(g, cx, hn, b, s);
        }
        let out = match call.logits {
            Logits::None => {
                return Outputs {
                    logits: hn,
                    last_hidden: None,
                    head_locals: [None; 4],
                }
            }
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
        let logits = if a.final_logit_softcapping {
            // logits = tanh(logits / cap) * cap
            g.at("final logit softcapping", None);
            let scaled = nn::unary(g, out, "logits / softcap", out.dsize);
            g.drop(out.v);
            let th = nn::tanh(g, scaled, "tanh(logits / softcap)");
            g.drop(scaled.v);
            let capped = nn::unary(g, th, "* softcap", th.dsize);
            g.drop(th.v);
            capped
        } else {
            out
        };
        Outputs {
            logits,
            last_hidden: Some(hn.v),
            head_locals: [None; 4],
        }
    }

    /// `*ForSequenceClassification.forward` after the model: `score` (no
    /// bias) over every position, then each sequence's rightmost token that
    /// is not `pad_token_id`: `(input_ids != pad).to(int32)` (a bool, then
    /// its int32 copy), `arange(s, dtype=int32)`, their product's `argmax`
    /// (int64), and `logits[arange(b), last_non_pad_token]`. The full
    /// logits, the mask, the positions and the chosen tokens are locals
    /// until the forward returns.
    fn classify_last_tokens(&self, g: &mut Graph, cx: &mut Ctx, hn: T, b: u64, s: u64) -> Outputs {
        g.at("score (all positions)", None);
        let logits = nn::linear(g, cx, hn, &self.w.lm_head, "score");
        g.at("score: last non-padding token", None);
        let is_token = g.input(b * s, Component::Transient);
        let mask = g.op(
            "non_pad_mask",
            &[is_token],
            b * s * 4,
            Component::Transient,
            Saves::NOTHING,
        );
        g.drop(is_token);
        let positions = g.input(s * 4, Component::Transient);
        let product = g.op(
            "token_indices * non_pad_mask",
            &[positions, mask],
            b * s * 4,
            Component::Transient,
            Saves::NOTHING,
        );
        let last = g.op(
            "argmax",
            &[product],
            b * INT64,
            Component::Transient,
            Saves::NOTHING,
        );
        g.drop(product);
        let rows = g.input(b * INT64, Component::Transient);
        let pooled_elems = b * self.classify.unwrap_or(2);
        let pooled = g.op(
            "pooled_logits",
            &[logits.v],
            pooled_elems * logits.dsize,
            Component::Transient,
            Saves::inputs(&[rows, last]),
        );
        g.drop(rows);
        Outputs {
            logits: T {
                v: pooled,
                elems: pooled_elems,
                dsize: logits.dsize,
            },
            last_hidden: Some(hn.v),
            head_locals: [Some(logits.v), Some(mask), Some(positions), Some(last)],
        }
    }
}

/// What a model call hands back.
struct Outputs {
    logits: T,
    /// The final norm's output: `hidden_states = outputs.last_hidden_state`
    /// in `*ForCausalLM.forward`, released when that forward returns, so
    /// after the loss it computes from `labels` (the H200 trace of
    /// Qwen3-0.6B amp training, b2 L512: the 4 MiB fp32 output freed after
    /// the loss's log-softmax, `measurements/h200-generalization/trace-segments-24.jsonl.gz`).
    last_hidden: Option<Value>,
    /// A sequence classifier's locals, released with the final norm's
    /// output ([`Model::classify_last_tokens`]).
    head_locals: [Option<Value>; 4],
}

impl Outputs {
    /// The logits once the call has returned (the final norm's output and
    /// the head's locals released).
    fn returned(self, g: &mut Graph) -> T {
        self.release_locals(g);
        self.logits
    }

    /// Releases what the model's forward held until it returned.
    fn release_locals(&self, g: &mut Graph) {
        if let Some(h) = self.last_hidden {
            g.drop(h);
        }
        for v in self.head_locals.iter().flatten() {
            g.drop(*v);
        }
    }
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
    let cast = workload.mode == Mode::Inference
        && workload.dtype.is_float()
        && workload.dtype != Dtype::Fp32
        && workload.load == LoadPath::BuildThenCast;
    if cast {
        // Constructed on the GPU in fp32, then `model.to(dtype)`.
        let mut scratch_replay = Replay::new(runtime.allocator, None);
        let mut scratch = Graph::new(&mut scratch_replay);
        scratch.record_params();
        let mut fp32 = workload.clone();
        fp32.dtype = Dtype::Fp32;
        weights::build(&mut scratch, a, &fp32, gathered_logits);
        let sizes = scratch.recorded_params();
        g.stage_fp32_construction(&sizes);
    }
    let mut w = weights::build(&mut g, a, workload, gathered_logits);
    if workload.mode == Mode::Training && !workload.dtype.is_float() {
        // `prepare_model_for_kbit_training` empties the cache after its
        // fp32 casts: the quantization's bf16 copies go back to the driver.
        g.replay.empty_cache();
    }
    #[cfg(feature = "diagnostics")]
    if cast && options.cache_emptied_after_load {
        g.replay.empty_cache();
        g.replay.reset_peaks();
    }
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
        padded: workload.padded,
        classify: (workload.head == Head::SequenceClassification).then(|| workload.labels()),
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
            cx.fp16 = super::nn::half_is_fp16(workload);
            let batches = workload.inference.batches;
            super::inference_batches(&mut g, batches, &mut |g, _| match workload.inference.kind {
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
                    model
                        .forward(g, &mut cx, &call, &mut cache, &mut None, &mut Vec::new())
                        .returned(g)
                        .v
                }
                InferenceKind::Generate => generation::generate(g, &model, &mut cx, workload, b, s),
            });
        }
        Mode::Training => training::train(&mut g, &model, workload, b, s, gpt2),
    }
    Ok(summary)
}

/// Element size of the residual stream between layers.
fn layer_input_dsize(cx: &Ctx, model: &Model) -> u64 {
    if cx.autocast {
        model.w.lm_head.weight_dsize.max(FP32)
    } else {
        cx.compute_dsize
    }
}
