//! Non-reentrant gradient checkpointing as PyTorch runs it, pinned to the
//! H200 trace of Llama-3.2-1B amp bf16 training with checkpointing, batch
//! 4, 1,024 tokens, in a fresh process
//! (`measurements/h200-parallel/traces/
//! llama1b_zero1_w1_amp_bf16_b4_L1024_ckpt1.trace.json.gz`; the replay
//! follows its large-pool events in order to the last). Events of more
//! than 1 MiB, in MiB, of the last layer's backward.

use crate::common;

use common::{named_events, MIB};
use headroom_core::workload::{Mode, Precision};
use headroom_core::{RuntimeProfile, Workload};

/// The last layer's backward: from the final norm's last free on, as
/// (allocation, MiB, op).
fn last_layer_backward() -> Vec<(bool, u64, &'static str)> {
    let mut workload = Workload {
        mode: Mode::Training,
        batch: 4,
        seq_len: 1024,
        ..Workload::default()
    };
    workload.training.precision = Precision::AmpBf16;
    workload.training.grad_checkpointing = true;
    workload.training.steps = 1;
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let events: Vec<_> = named_events("llama-3.2-1b", &workload, &runtime, MIB + 1)
        .into_iter()
        .map(|(alloc, bytes, op)| (alloc, bytes / MIB, op))
        .collect();
    let last_norm = events
        .iter()
        .rposition(|e| e.2 == "final norm")
        .expect("the final norm");
    events[last_norm + 1..].to_vec()
}

/// Trace events 2,673 and 2,674: the residual addition, which saved
/// nothing, runs its backward before anything unpacks a saved tensor: its
/// bf16 cast of the fp32 gradient for `down_proj`'s output (16 MiB) comes
/// first, then the recompute starts with the input norm.
#[test]
fn the_trailing_addition_runs_backward_before_the_recompute() {
    let events = last_layer_backward();
    assert_eq!(
        events[..2],
        [
            (true, 16, "mlp: residual add"),
            (true, 32, "attention: input norm"),
        ]
    );
}

/// Early stop: the recompute ends once `down_proj` packs its input, before
/// its kernel, so neither `down_proj`'s output nor the residual sum is
/// allocated again; the first `down_proj` events are its backward's.
#[test]
fn the_recompute_stops_before_the_last_projection() {
    let events = last_layer_backward();
    let product = events
        .iter()
        .position(|e| *e == (true, 64, "mlp: act(gate) * up"))
        .expect("the recomputed product");
    let before_backward = &events[1..product];
    assert!(
        !before_backward
            .iter()
            .any(|e| e.0 && e.2 == "mlp: down_proj"),
        "down_proj ran in the recompute: {before_backward:?}"
    );
    assert_eq!(
        events[product + 1..product + 3],
        [
            (true, 32, "autocast: weight cast to bf16"),
            (false, 32, "mlp: down_proj"),
        ],
        "down_proj's weight cast runs; its kernel does not, its backward follows"
    );
}

/// Trace events 2,911 to 2,914: the bf16 key times fp32 `sin` gets its
/// gradient in fp32 (8 MiB), then the engine's cast to bf16 (4 MiB), then
/// the fp32 one goes; the queries' the same at 32 and 16 MiB.
#[test]
fn a_narrower_operand_gets_a_wide_gradient_then_its_cast() {
    let events = last_layer_backward();
    let rotary: Vec<_> = events
        .iter()
        .filter(|e| e.2 == "rotary: rotate_half(x) * sin")
        .map(|e| (e.0, e.1))
        .collect();
    // The recompute's forward products (keys 8 MiB, queries 32 MiB) and
    // their inputs' frees come first, then backward: keys, then queries.
    let backward_start = rotary
        .iter()
        .position(|&e| e == (true, 8))
        .and_then(|first| {
            rotary[first + 1..]
                .iter()
                .position(|&e| e == (true, 8))
                .map(|second| first + 1 + second)
        })
        .expect("the keys' backward");
    assert_eq!(
        rotary[backward_start..backward_start + 6],
        [
            (true, 8),
            (true, 4),
            (false, 8),
            (true, 32),
            (true, 16),
            (false, 32),
        ]
    );
}

/// cuDNN attention's backward (16-bit SDPA's default on the H200): the
/// three input gradients (queries 16 MiB, keys and values 4 MiB each),
/// then one workspace of two fp32 query-sized buffers (grouped-query
/// attention reduces the key and value gradients), the fp32 softmax
/// statistics and 256 bytes: 67,633,408 B
/// (`measurements/sdpa-backward/probe.jsonl`).
#[test]
fn cudnn_attention_backward_takes_its_workspace_after_the_gradients() {
    let events = last_layer_backward();
    let workspace = 2 * (4 * 32 * 1024 * 64 * 4) + 4 * 32 * 1024 * 4 + 256;
    assert_eq!(workspace, 67_633_408);
    let at = events
        .iter()
        .position(|e| *e == (true, workspace / MIB, "attention (sdpa)"))
        .expect("the workspace");
    assert_eq!(
        events[at - 3..=at + 1],
        [
            (true, 16, "attention (sdpa)"),
            (true, 4, "attention (sdpa)"),
            (true, 4, "attention (sdpa)"),
            (true, 64, "attention (sdpa)"),
            (false, 64, "attention (sdpa)"),
        ]
    );
}
