//! Beam search in `generate`, pinned to the H200 probe of Llama-3.2-1B
//! (random weights, bf16, SDPA), 2,048-token prompts and 16 new tokens
//! (`measurements/generation-search/probe.jsonl` and `traces/`): 4 beams
//! over 2 prompts run as the 8 rows of a greedy batch of 8, and after each
//! step every layer's keys, then values, are gathered into new tensors
//! (`reorder_cache`).

use headroom_core::arch::Dtype;
use headroom_core::families::replay;
use headroom_core::trace::Replay;
use headroom_core::workload::{InferenceKind, Mode};
use headroom_core::{estimate, presets, RuntimeProfile, Workload};

fn generation(batch: u32, beams: u32) -> Workload {
    let mut w = Workload {
        mode: Mode::Inference,
        batch,
        seq_len: 2048,
        dtype: Dtype::Bf16,
        ..Workload::default()
    };
    w.inference.kind = InferenceKind::Generate;
    w.inference.new_tokens = 16;
    w.inference.num_beams = beams;
    w
}

/// Allocations of each decode step's cache size (8 rows x 8 heads x
/// (2,048 + k) tokens x 64 x 2 bytes, k = 1 to 15).
fn cache_allocations(w: &Workload) -> Vec<usize> {
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut r = Replay::new(runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = 16 << 20;
    replay(&arch, w, &runtime, &mut r).unwrap();
    let events = r.event_log.take().unwrap();
    (1..16u64)
        .map(|k| {
            let size = 8 * 8 * (2048 + k) * 64 * 2;
            events.iter().filter(|e| e.0 && e.1 == size).count()
        })
        .collect()
}

#[test]
fn every_step_gathers_each_layers_keys_and_values_once_more() {
    // The probe's allocation counts: each size 32 times greedy (keys and
    // values of 16 layers), 64 times with beams (32 gathers more).
    assert_eq!(cache_allocations(&generation(8, 1)), vec![32; 15]);
    assert_eq!(cache_allocations(&generation(2, 4)), vec![64; 15]);
}

#[test]
fn four_beams_over_two_prompts_peak_as_a_greedy_batch_of_eight() {
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let greedy = estimate(&arch, &generation(8, 1), &runtime).unwrap();
    let beams = estimate(&arch, &generation(2, 4), &runtime).unwrap();
    // Measured: reserved 4,620,025,856 B both; allocated 300,544 B higher
    // with beams (the beams' sequences and scores).
    assert_eq!(beams.reserved_peak, greedy.reserved_peak);
    let more = beams.allocated_peak.0 - greedy.allocated_peak.0;
    assert!(more > 0 && more < 1 << 20, "{more} B");
}
