//! The replay's shortcuts are optimisations only: they must give exactly
//! the estimate of the full replay.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate_with, EstimateOptions, ReplayOptions};
use headroom_core::workload::{InferenceKind, Mode};
use headroom_core::{estimate, presets, RuntimeProfile, Workload};

#[test]
fn decode_shortcut_matches_full_replay() {
    let runtime = RuntimeProfile::h200();
    for id in [
        "llama-3.1-8b",
        "llama-3.2-1b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "gpt2",
    ] {
        let arch = presets::find(id).unwrap().arch;
        for (batch, seq) in [
            (1u32, 128u32),
            (1, 4096),
            (4, 8192),
            (32, 2048),
            (1, 65536),
            (96, 512),
        ] {
            let mut w = Workload::default();
            w.mode = Mode::Inference;
            w.inference.kind = InferenceKind::Generate;
            w.inference.new_tokens = 6;
            w.batch = batch;
            w.seq_len = seq;
            let fast = estimate(&arch, &w, &runtime).unwrap();
            let full_replay = EstimateOptions {
                replay: ReplayOptions {
                    decode_shortcut: false,
                },
                ..EstimateOptions::default()
            };
            let full = estimate_with(&arch, &w, &runtime, full_replay).unwrap();
            assert!(fast.driver_peak.0 > 0);
            assert_eq!(fast.driver_peak, full.driver_peak, "{id} b{batch} s{seq}");
            assert_eq!(
                fast.allocated_peak, full.allocated_peak,
                "{id} b{batch} s{seq}"
            );
            assert_eq!(
                fast.reserved_peak, full.reserved_peak,
                "{id} b{batch} s{seq}"
            );
        }
    }
}
