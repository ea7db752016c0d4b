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

/// The sizes of the blocks allocated to gather the cache for the chosen
/// beams, in order.
fn reorders(w: &Workload) -> Vec<u64> {
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut r = Replay::new(runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = 1 << 20;
    replay(&arch, w, &runtime, &mut r).unwrap();
    r.event_log
        .take()
        .unwrap()
        .into_iter()
        .filter(|e| e.0 && e.3.name == "KV cache: index_select of the chosen beams")
        .map(|e| e.1)
        .collect()
}

#[test]
fn every_step_gathers_each_layers_keys_and_values_once_more() {
    // The probe: with beams each of the 16 cache sizes (8 rows x 8 heads x
    // (2,048 + k) tokens x 64 x 2 bytes, k = 0 to 15) is allocated 32
    // times more than greedy, the keys and values of 16 layers after each
    // of the 16 forwards.
    assert!(reorders(&generation(8, 1)).is_empty());
    let gathered = reorders(&generation(2, 4));
    assert_eq!(gathered.len(), 16 * 32);
    for (i, &block) in gathered.iter().enumerate() {
        let k = (i / 32) as u64;
        let cache = 8 * 8 * (2048 + k) * 64 * 2;
        // A block keeps a free remainder of at most 1 MiB unsplit.
        assert!(
            (cache..=cache + (1 << 20)).contains(&block),
            "gather {i}: {block} B for a {cache} B cache"
        );
    }
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

/// After each step's forward, greedy `generate` as the harness runs it
/// (exactly `new_tokens`: `min_new_tokens` equal to `max_new_tokens`):
/// the fp32 copy of the last position's logits, then the two
/// minimum-length processors (an `arange` of the vocabulary, a clone and
/// a `torch.where` copy each), the previous step's copy and scores freed
/// as the new ones replace them, and the model's logits last (`del
/// outputs`). The trace `traces/greedy_b8.events.txt`, lines 1205-1219
/// (the second decode step; blocks of at least 1,000,000 bytes).
#[test]
fn a_greedy_step_holds_its_logits_and_scores_until_the_next() {
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut r = Replay::new(runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = 1_000_000;
    replay(&arch, &generation(8, 1), &runtime, &mut r).unwrap();
    let events = r.event_log.take().unwrap();
    let copies: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.0 && e.3.name == "generate: logits[:, -1].float()")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(copies.len(), 16, "one copy per forward");
    let step: Vec<(bool, u64)> = events[copies[2]..copies[2] + 15]
        .iter()
        .map(|e| (e.0, e.1))
        .collect();
    let (logits, arange, model_logits) = (4_104_192, 1_026_048, 2_052_096);
    let trace = [
        (true, logits),
        (false, logits),
        (true, arange),
        (true, logits),
        (true, logits),
        (false, logits),
        (false, arange),
        (true, logits),
        (true, arange),
        (true, logits),
        (false, logits),
        (false, arange),
        (false, logits),
        (false, logits),
        (false, model_logits),
    ];
    // A block may carry an unsplit free remainder (at most 1 MiB) where its
    // placement differs from the trace's.
    assert!(
        step.len() == trace.len()
            && step
                .iter()
                .zip(trace)
                .all(|(&(a, got), (b, want))| a == b && (want..=want + (1 << 20)).contains(&got)),
        "{step:?}"
    );
}
