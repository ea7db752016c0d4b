//! `generate(return_dict_in_generate=True, output_scores=..., output_logits=...)`
//! keeps every step's scores or logits to the end, as the H200 jobs of
//! `measurements/real-jobs-2/measured-9.jsonl` and `measured-10.jsonl`
//! (`jobs/generate_qwen.py`, a fresh process each) measured them. A Qwen
//! config built without an `eos_token_id` runs no logits processor, and a
//! step's scores are its fp32 logits: keeping both keeps one tensor a step.

use crate::common;

use common::MIB;
use headroom_core::readers::Spec;
use headroom_core::{estimate, Estimate};

fn estimate_of(json: &str) -> Estimate {
    let spec = Spec::from_json(json).unwrap();
    estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap()
}

fn qwen05b(keep: &str, processors: bool) -> String {
    format!(
        r#"{{"model": "qwen2.5-0.5b", "workload": {{"mode": "inference", "batch": 8,
        "seq_len": 2048, "dtype": "bf16", "inference": {{"kind": "generate",
        "new_tokens": 256, "logits_processors": {processors}{keep}}}}},
        "runtime": {{"process_ran_backward": false}}}}"#
    )
}

/// Qwen2.5-0.5B, batch 8, 2,048 + 256 tokens, `output_scores=True`:
/// measured `max_memory_allocated()` 2,506,599,936 B and
/// `max_memory_reserved()` 3,349,151,744 B (the same job without the
/// scores: 1,832,562,688 and 2,069,889,024).
#[test]
fn returned_scores_are_held_to_the_end() {
    let e = estimate_of(&qwen05b(r#", "output_scores": true"#, false));
    assert!(
        e.allocated_peak.0.abs_diff(2_506_599_936) < 2 * MIB,
        "allocated {}",
        e.allocated_peak.0
    );
    assert_eq!(e.reserved_peak.0, 3_349_151_744);
    let without = estimate_of(&qwen05b("", false));
    assert!(e.allocated_peak.0 > without.allocated_peak.0 + 600_000_000);
}

/// With no processor the scores are the logits: keeping both costs what
/// keeping one does (measured: the same allocated peak to 12 KB).
#[test]
fn scores_and_logits_share_a_tensor_without_processors() {
    let both = r#", "output_scores": true, "output_logits": true"#;
    let scores = r#", "output_scores": true"#;
    assert_eq!(
        estimate_of(&qwen05b(both, false)).allocated_peak,
        estimate_of(&qwen05b(scores, false)).allocated_peak
    );
}

/// With the minimum-length processors (the same jobs with an
/// `eos_token_id`, `measured-10.jsonl`, predicted before they ran) the
/// scores are the processors' new tensors: keeping both keeps two a step.
/// Measured: scores and logits 3,775,800,320 B allocated and 4,292,870,144
/// B reserved; the scores alone 2,529,465,344 and 2,720,006,144.
#[test]
fn with_processors_scores_and_logits_are_two_tensors_a_step() {
    for (keep, allocated, reserved) in [
        (
            r#", "output_scores": true, "output_logits": true"#,
            3_775_800_320,
            4_292_870_144,
        ),
        (r#", "output_scores": true"#, 2_529_465_344, 2_720_006_144),
    ] {
        let e = estimate_of(&qwen05b(keep, true));
        assert!(
            e.allocated_peak.0.abs_diff(allocated) < 2 * MIB,
            "{keep}: allocated {}",
            e.allocated_peak.0
        );
        assert_eq!(e.reserved_peak.0, reserved, "{keep}");
    }
}

/// Qwen3-4B, batch 16, 1,024 + 128 tokens, `output_logits=True`: measured
/// 12,132,794,880 B allocated, 12,870,221,824 B reserved; the prefill,
/// not the kept logits, sets the peak.
#[test]
fn returned_logits_follow_the_measurement() {
    let e = estimate_of(
        r#"{"model": "qwen3-4b", "workload": {"mode": "inference", "batch": 16,
        "seq_len": 1024, "dtype": "bf16", "inference": {"kind": "generate",
        "new_tokens": 128, "logits_processors": false, "output_logits": true}},
        "runtime": {"process_ran_backward": false}}"#,
    );
    assert!(e.allocated_peak.0.abs_diff(12_132_794_880) < 2 * MIB);
    assert!(e.reserved_peak.0.abs_diff(12_870_221_824) <= 4 * MIB);
}

/// The refusal a spec gets, whether reading or estimating it refuses it.
fn refusal(json: &str) -> String {
    match Spec::from_json(json) {
        Err(e) => e.to_string(),
        Ok(spec) => estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("accepted: {json}")),
    }
}

#[test]
fn returned_scores_outside_greedy_generation_of_one_batch_are_refused() {
    for (json, field) in [
        (
            qwen05b(r#", "output_scores": true, "num_beams": 2"#, true),
            "workload.inference.output_scores",
        ),
        (
            qwen05b(r#", "output_logits": true, "batches": 2"#, true),
            "workload.inference.output_logits",
        ),
    ] {
        let text = refusal(&json);
        assert!(text.contains(field) && text.contains("false"), "{text}");
    }
    let bert = r#"{"model": "bert-base-uncased", "workload": {"mode": "inference",
        "batch": 8, "seq_len": 128, "inference": {"kind": "generate", "output_scores": true}}}"#;
    let text = refusal(bert);
    assert!(text.contains("workload.inference.output_scores"), "{text}");
    let text = refusal(&qwen05b(r#", "output_scores": "yes""#, true));
    assert!(
        text.contains("output_scores") && text.contains("true or false"),
        "{text}"
    );
}
