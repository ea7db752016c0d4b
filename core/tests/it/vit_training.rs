//! ViT-B/16 training under autocast as the H200 trace of amp bf16 SGD with
//! momentum, batch 128, 224 px, runs it
//! (`measurements/h200-generalization/trace-segments-32.jsonl.gz`, a fresh
//! process; blocks above 1 MiB, in MiB): the replay makes the same
//! allocations (to within 1 MiB a block: the trace gives requested sizes,
//! the replay block sizes) and frees, in the same order, through the first
//! step's forward and the backward of its last block, as the repository's
//! alignment scripts compare them (a free's size is not compared: which of
//! two blocks freed together goes first is not always followed). Mechanisms
//! this pins: the patch embedding's cuDNN copies (forward event 4), the
//! autocast cast `nn.MultiheadAttention`'s `in_proj` copies living until
//! the call returns (events 11 to 15), the contiguous copies layer norms
//! make of the transposed residual stream, forward and backward (events 25
//! to 27, 367 to 372), the head's input as a view of the final norm's
//! output (events 360 and 361), the conv's weight cast kept for backward,
//! the attention output's transposed gradient copied (404), and q, k, v as
//! views of the packed projection (414 to 436). Next difference: event 437,
//! the order in which `in_proj`'s saved weight cast and input copy go.

use crate::common;

use common::MIB;

const TOLERANCE: f64 = 1.0;

/// The replay's events above 1 MiB, weights' loading left out: (allocation, MiB).
fn replay_events() -> Vec<(bool, f64)> {
    let json = r#"{"model": "vit-b-16", "workload": {"mode": "training", "batch": 128,
        "image_size": 224, "training": {"optimizer": "sgd", "momentum": 0.9,
        "precision": "amp_bf16"}, "loss": "cross_entropy"},
        "runtime": {"process_ran_backward": false}}"#;
    common::spec_events_above_one_mib(json)
        .into_iter()
        .map(|(alloc, size)| (alloc, size as f64 / MIB as f64))
        .collect()
}

fn assert_matches(events: &[(bool, f64)], from: usize, trace: &[(bool, f64)]) {
    for (i, (&(alloc, mib), &(t_alloc, t_mib))) in events[from..].iter().zip(trace).enumerate() {
        assert!(
            alloc == t_alloc && (!alloc || (mib - t_mib).abs() <= TOLERANCE),
            "event {}: replay {} {mib:.2} MiB, trace {} {t_mib:.2} MiB",
            from + i,
            if alloc { "allocates" } else { "frees" },
            if t_alloc { "allocates" } else { "frees" },
        );
    }
}

#[test]
fn vit_amp_training_forward_follows_the_trace() {
    let trace = common::trace::<f64>("vit_b16_amp_bf16_sgd_b128_forward");
    assert_matches(&replay_events(), 0, &trace);
}

#[test]
fn vit_amp_training_backward_of_the_last_block_follows_the_trace() {
    let trace = common::trace::<f64>("vit_b16_amp_bf16_sgd_b128_last_block_backward");
    assert_matches(&replay_events(), 356, &trace);
}
