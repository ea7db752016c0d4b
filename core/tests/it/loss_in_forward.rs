//! A model's forward computes the loss from `labels` and only then
//! returns, releasing its locals: the final hidden states live through the
//! loss. Pinned to two H200 traces (events of at least 2 MiB, in MiB).

use crate::common;

use common::{events_in_mib, MIB};
use headroom_core::workload::{Mode, Precision};
use headroom_core::{RuntimeProfile, Workload};

/// A training job's events in a fresh process (no backward run before).
fn fresh_training(id: &str, batch: u32, seq_len: u32) -> Vec<(bool, u64)> {
    let mut workload = Workload {
        mode: Mode::Training,
        batch,
        seq_len,
        ..Workload::default()
    };
    workload.training.precision = Precision::AmpBf16;
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    events_in_mib(id, &workload, &runtime, 2 * MIB)
}

/// The events from the first allocation of `size` MiB that follows one
/// of `after` MiB.
fn from(events: &[(bool, u64)], after: u64, size: u64) -> &[(bool, u64)] {
    let first = events
        .iter()
        .position(|&e| e == (true, after))
        .expect("the anchor");
    let at = events[first + 1..]
        .iter()
        .position(|&e| e == (true, size))
        .expect("the allocation");
    &events[first + 1 + at..]
}

/// Qwen3-0.6B amp bf16 training, b2 L512
/// (`measurements/h200-generalization/trace-segments-24.jsonl.gz`, events
/// 2,136 to 2,141): the final norm's fp32 output (4 MiB) is
/// `hidden_states` in `Qwen3ForCausalLM.forward`, released when that
/// forward returns: after the loss's fp32 logits and log-softmax (594 MiB
/// blocks) and the fp32 logits' release, before the caller drops the
/// 16-bit logits (297 MiB) that the outputs hold.
#[test]
fn a_causal_lm_releases_its_final_hidden_states_after_the_loss() {
    let events = fresh_training("qwen3-0.6b", 2, 512);
    // lm_head's output follows its weight's 16-bit cast, of the same size.
    let logits = from(&events, 296, 296);
    assert_eq!(
        logits[..6],
        [
            (true, 296),
            (true, 594),
            (true, 594),
            (false, 594),
            (false, 4),
            (false, 296),
        ]
    );
}

/// BERT-base amp bf16 training, b32 L128
/// (`measurements/h200-segments/training-segments.jsonl`, events 403 to
/// 410): the masked-LM head's LayerNorm output (12 MiB) goes as the head
/// returns, after the 16-bit logits (238 MiB, after the decoder weight's
/// 44 MiB cast); `sequence_output`
/// (12 MiB) goes as `BertForMaskedLM.forward` returns, after the loss's
/// two allocations, before the logits.
#[test]
fn bert_releases_its_sequence_output_after_the_loss() {
    let events = fresh_training("bert-base-uncased", 32, 128);
    let decoder = from(&events, 44, 238);
    assert_eq!(
        decoder[..6],
        [
            (true, 238),
            (false, 12),
            (true, 238),
            (true, 476),
            (false, 12),
            (false, 238),
        ]
    );
}
