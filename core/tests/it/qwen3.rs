//! Qwen3's attention (each head's q/k norms, SDPA's autocast casts),
//! pinned to the H200 trace of Qwen3-0.6B amp bf16 training, batch 2, 512
//! tokens, SDPA, in a fresh process
//! (`measurements/h200-generalization/trace-segments-24.jsonl.gz`, case
//! `qwen3_0p6b_train_amp_bf16_adamw_b2_L512`; events of at least 2 MiB,
//! in MiB).

use crate::common;

use common::{events_in_mib, MIB};
use headroom_core::workload::{Mode, Precision};
use headroom_core::{RuntimeProfile, Workload};

/// The trace's job's events from its forward's first matmul on (cuBLAS's
/// 32 MiB workspace, trace event 1): its fresh process has not run a
/// backward pass.
fn traced_job() -> Vec<(bool, u64)> {
    let mut workload = Workload {
        mode: Mode::Training,
        batch: 2,
        seq_len: 512,
        ..Workload::default()
    };
    workload.training.precision = Precision::AmpBf16;
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let events = events_in_mib("qwen3-0.6b", &workload, &runtime, 2 * MIB);
    let workspace = events
        .iter()
        .position(|&e| e == (true, 32))
        .expect("cuBLAS's workspace");
    events[workspace..].to_vec()
}

/// Trace events 6 to 30: each projection, then its RMSNorm over the head
/// width (`x.float()`, `pow`, `x * rsqrt`, `.to(bf16)`, `weight * x`: an
/// fp32 product, the weight being fp32), the projection's output freed
/// once its norm returns; the queries (4 MiB in bf16), the keys (2 MiB),
/// then the values without a norm.
#[test]
fn each_projection_is_normalised_per_head_before_the_next() {
    let events = traced_job();
    // `events[i]` is trace event `i + 1`.
    assert_eq!(
        events[5..30],
        [
            // q_proj: autocast's weight and input casts, the output.
            (true, 4),
            (true, 2),
            (true, 4),
            // q_norm.
            (true, 8),
            (true, 8),
            (false, 8),
            (true, 8),
            (true, 4),
            (true, 8),
            (false, 8),
            (false, 4),
            // k_proj.
            (true, 2),
            (true, 2),
            (true, 2),
            // k_norm.
            (true, 4),
            (true, 4),
            (false, 4),
            (true, 4),
            (true, 2),
            (true, 4),
            (false, 4),
            (false, 2),
            // v_proj.
            (true, 2),
            (true, 2),
            (true, 2),
        ]
    );
}

/// Trace events 51 to 53: SDPA under autocast casts its fp32 arguments
/// right to left, the keys (2 MiB in bf16) before the queries (4 MiB),
/// then allocates its output (4 MiB), after the rotary embedding's
/// releases (events 47 to 50).
#[test]
fn autocast_casts_the_keys_before_the_queries() {
    let events = traced_job();
    assert_eq!(
        events[46..53],
        [
            (false, 4),
            (false, 4),
            (false, 8),
            (false, 4),
            (true, 2),
            (true, 4),
            (true, 4)
        ]
    );
}
