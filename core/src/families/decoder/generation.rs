//! Generation: the `DynamicCache` (with sliding windows), the decode
//! steps and their shortcut.

use super::{CachedLayer, Call, KvCache, Model};
use crate::arch::Dtype;
use crate::component::Component;
use crate::families::nn::{Ctx, FP32, INT64};
use crate::graph::{Graph, Saves, Value};
use crate::workload::Workload;
use alloc::vec::Vec;

impl KvCache {
    fn kept(&self, l: usize) -> u64 {
        self.layers.get(l).map_or(0, |c| c.kept)
    }

    /// `update`: cat onto the kept tokens (keys, then values, each replacing
    /// the old storage). Returns the new keys/values and their length.
    pub(super) fn update(
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

impl KvCache {
    /// `reorder_cache(beam_idx)` after a beam-search step: each layer's keys,
    /// then its values, `index_select`ed into a new tensor of the same size,
    /// the old one freed as it is replaced.
    fn reorder(&mut self, g: &mut Graph) {
        for (l, layer) in self.layers.iter_mut().enumerate() {
            g.at("beam search: reorder the KV cache", Some(l as u32));
            for kv in [&mut layer.keys, &mut layer.values] {
                let bytes = g.bytes(*kv);
                let moved = g.op(
                    "KV cache: index_select of the chosen beams",
                    &[],
                    bytes,
                    Component::KvCache,
                    Saves::NOTHING,
                );
                g.drop(*kv);
                *kv = moved;
            }
        }
    }
}

impl Model<'_> {
    /// A decode step (one token per sequence) whose per-layer transients all
    /// fit the small pool (<= 1 MiB) while each layer's keys and values are
    /// large-pool blocks: the two pools never share blocks, so layers 1..N
    /// leave the small pool exactly as layer 0 did and only their KV-cache
    /// cats change the large pool. Tested against the full replay in
    /// `decode_shortcut_matches_full_replay`.
    pub(super) fn decode_shortcut(&self, call: &Call, cache: &Option<KvCache>) -> bool {
        let Some(c) = cache else { return false };
        if call.tokens != 1
            || c.layers.len() != self.a.num_layers as usize
            || !c.dtype.is_float()
            || !self.decode_shortcut
            // A padding mask repeats each layer's cache for SDPA.
            || self.padded
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
        // Fused projections output q, k and v (and gate and up) at once.
        let qkv = if super::weights::fused_qkv(a) {
            (a.num_heads + 2 * a.num_kv_heads) * a.head_dim
        } else {
            a.num_heads * a.head_dim
        };
        let mlp = if a.fused_projections {
            2 * a.intermediate_size
        } else {
            a.intermediate_size
        };
        let widest = [a.hidden_size, mlp, qkv].into_iter().max().unwrap_or(0) as u64;
        let transient = call.batch * widest * FP32;
        let shortest = c.layers.iter().map(|l| l.kept).min().unwrap_or(0);
        let kv = c
            .dtype
            .storage_bytes(call.batch * a.num_kv_heads as u64 * shortest * a.head_dim as u64);
        // Once the sliding layers' keys reach the window, they take a mask
        // and (with grouped heads) repeat their keys and values: large-pool
        // transients that full-attention layers do not have.
        let repeats = a.num_kv_heads < a.num_heads
            && self.sliding_kv_len(call, cache).is_some_and(|kv| {
                crate::families::nn::sliding_window_mask_needed(a.sliding_window as u64, kv)
            });
        transient <= crate::allocator::SMALL_SIZE && kv > crate::allocator::SMALL_SIZE && !repeats
    }

    /// The KV-cache update of layer `l` alone (`torch.cat` of keys, then values).
    pub(super) fn kv_cat(&self, g: &mut Graph, l: usize, call: &Call, cache: &mut Option<KvCache>) {
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
}

/// `generate`: the prefill, then `new_tokens - 1` decode steps (greedy,
/// or beam search with `num_beams` rows per prompt), each step's
/// next-token work after its forward (`_sample` and `_beam_search` in
/// transformers' `generation/utils.py`, traced in
/// `measurements/generation-search/`).
pub(super) fn generate(
    g: &mut Graph,
    model: &Model,
    cx: &mut Ctx,
    workload: &Workload,
    b: u64,
    s: u64,
) -> Value {
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
    let beams = u64::from(workload.inference.num_beams.max(1));
    // Beam search runs every prompt as `num_beams` rows of the batch
    // (`_expand_inputs_for_generation`), from the prefill on.
    let rows = b * beams;
    let prompts = g.input(b * s * INT64, Component::Activations);
    let mut beam_sequences = Vec::new();
    let mut ids = if beams > 1 {
        g.at("beam search: prompts repeated for each beam", None);
        let repeated = g.input(rows * s * INT64, Component::Activations);
        // `running_sequences` and its clone `sequences`, (batch, beams,
        // prompt + new tokens) int64, held to the end.
        for _ in 0..2 {
            beam_sequences.push(g.input(rows * (s + new_tokens) * INT64, Component::Activations));
        }
        repeated
    } else {
        prompts
    };
    let mut tokens = s;
    // The fp32 copy of a step's last-position logits (`next_token_logits`,
    // beam search's `logits`) stays referenced until the next step's copy
    // replaces it, and so do the scores chosen from (`next_token_scores`,
    // beam search's `log_probs`).
    let mut held_logits: Option<Value> = None;
    let mut held_scores: Option<Value> = None;
    // `return_dict_in_generate` with `output_scores` / `output_logits`:
    // each step's tensor is also appended to a tuple the output returns.
    let (keep_scores, keep_logits) = (
        workload.inference.output_scores,
        workload.inference.output_logits,
    );
    let mut returned_per_step = Vec::new();
    for step in 0..new_tokens {
        let call = Call {
            batch: rows,
            tokens: if step == 0 { s } else { 1 },
            logits: workload.inference.logits,
            checkpointing: false,
            gpt2_dropout: false,
            decode: step > 0,
            generate: true,
        };
        let logits = model
            .forward(g, cx, &call, &mut cache, &mut None, &mut Vec::new())
            .returned(g);
        g.at("generate: next-token logits to fp32", None);
        let next = g.op(
            "generate: logits[:, -1].float()",
            &[logits.v],
            rows * v * FP32,
            Component::Transient,
            Saves::NOTHING,
        );
        if keep_logits {
            g.hold(next);
            returned_per_step.push(next);
        }
        if let Some(old) = held_logits.replace(next) {
            g.drop(old);
        }
        if beams > 1 {
            g.at("beam search: scores", None);
            let log_softmax = g.op(
                "beam search: log_softmax",
                &[next],
                rows * v * FP32,
                Component::Transient,
                Saves::NOTHING,
            );
            if let Some(old) = held_scores.take() {
                g.drop(old);
            }
            let processed = if workload.inference.logits_processors {
                let processed = exact_count_processors(g, log_softmax, rows, v);
                g.drop(log_softmax);
                processed
            } else {
                log_softmax
            };
            // `del model_outputs`
            g.drop(logits.v);
            let log_probs = g.op(
                "beam search: log_probs + running beam scores",
                &[processed],
                rows * v * FP32,
                Component::Transient,
                Saves::NOTHING,
            );
            g.drop(processed);
            held_scores = Some(log_probs);
            // `cache.reorder_cache(beam_idx)`: every layer's keys, then
            // values, gathered into new tensors in the chosen beams' order.
            if let Some(c) = cache.as_mut() {
                c.reorder(g);
            }
        } else {
            let scores = if workload.inference.logits_processors {
                exact_count_processors(g, next, rows, v)
            } else {
                // `next_token_scores` is `next_token_logits`.
                g.hold(next);
                next
            };
            if keep_scores {
                g.hold(scores);
                returned_per_step.push(scores);
            }
            if let Some(old) = held_scores.replace(scores) {
                g.drop(old);
            }
            // `del outputs`
            g.drop(logits.v);
        }
        if step + 1 == new_tokens {
            break;
        }
        tokens += 1;
        // Greedy: `torch.cat([input_ids, next_tokens[:, None]])`; beam
        // search: the running sequences flattened into a new tensor.
        let new_ids = g.input(rows * tokens * INT64, Component::Activations);
        g.drop(ids);
        ids = new_ids;
    }
    g.drop_all(
        &[held_logits, held_scores]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>(),
    );
    // `generate` returns the sequences (the prompt and the new tokens);
    // its cache is released as it returns.
    for layer in cache.map(|c| c.layers).unwrap_or_default() {
        g.drop_all(&[layer.keys, layer.values]);
    }
    // The returned tuples outlive the call; nothing after it is larger.
    g.drop_all(&returned_per_step);
    if beams > 1 {
        // The best beam of each prompt.
        let best = g.input(b * tokens * INT64, Component::Activations);
        g.drop_all(&[ids, prompts]);
        g.drop_all(&beam_sequences);
        return best;
    }
    ids
}

/// The logits processors that make `generate` produce exactly `new_tokens`
/// tokens (`min_new_tokens` equal to `max_new_tokens`, as the measurement
/// harness asks; the traces in `measurements/generation-search/traces/`):
/// `MinLengthLogitsProcessor`, then `MinNewTokensLengthLogitsProcessor`.
/// Each makes a vocabulary-long `arange` and its end-of-sequence mask,
/// clones the scores and masks the end-of-sequence token with
/// `torch.where` into a new tensor. Returns the processed scores (a new
/// tensor; `scores` is left to the caller).
fn exact_count_processors(g: &mut Graph, scores: Value, rows: u64, vocab: u64) -> Value {
    g.at("generate: minimum-length logits processors", None);
    let mut input = scores;
    for first in [true, false] {
        let tables = |g: &mut Graph| {
            let arange = g.input(vocab * INT64, Component::Transient);
            let eos_mask = g.input(vocab, Component::Transient);
            [arange, eos_mask]
        };
        // The first processor makes its tables before the clone, the
        // second after it.
        let early = first.then(|| tables(g));
        let clone = g.op(
            "logits processor: scores.clone()",
            &[input],
            rows * vocab * FP32,
            Component::Transient,
            Saves::NOTHING,
        );
        let tables = early.unwrap_or_else(|| tables(g));
        let masked = g.op(
            "logits processor: torch.where(eos_mask, -inf, scores)",
            &[input],
            rows * vocab * FP32,
            Component::Transient,
            Saves::NOTHING,
        );
        g.drop(clone);
        g.drop_all(&tables);
        if !first {
            g.drop(input);
        }
        input = masked;
    }
    input
}
