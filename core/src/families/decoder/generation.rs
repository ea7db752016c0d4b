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
    let mut ids = g.input(b * s * INT64, Component::Activations);
    let mut tokens = s;
    for step in 0..new_tokens {
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
    // `generate` returns the sequences (the prompt and the new tokens);
    // its cache is released as it returns.
    for layer in cache.map(|c| c.layers).unwrap_or_default() {
        g.drop_all(&[layer.keys, layer.values]);
    }
    ids
}
