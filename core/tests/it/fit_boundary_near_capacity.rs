//! Near a card's end whether a job runs is not monotone in its length: the
//! replay of Llama 3.1 8B bf16 training with gradient checkpointing within
//! an H100's usable memory runs at 11,241 tokens, not at 11,242, again at
//! 11,244, and on and off above, up to 12,463 (on the H100, 11,500 tokens
//! ran and 12,000 ran out of memory twice). A bisection on "runs" answered
//! the top of the highest island (12,459 with the likely range taken in);
//! the longest length reported is now the one below the first failure the
//! search finds, with the island reported apart.

use headroom_core::readers::Spec;
use headroom_core::search::{boundary, probe_at, Axis, SCAN_POINTS};

fn llama_8b_training() -> Spec {
    Spec::from_json(
        r#"{"model":"llama-3.1-8b","workload":{"mode":"training","batch":1,"seq_len":4096,"dtype":"bf16",
            "training":{"optimizer":"adamw","precision":"bf16","grad_checkpointing":true}}}"#,
    )
    .unwrap()
}

#[test]
fn the_longest_length_is_below_a_failure_never_an_island_top() {
    let spec = llama_8b_training();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let h100 = headroom_core::gpus::find("h100-80gb").unwrap().usable_bytes;
    let at = |len| probe_at(arch, w, rt, h100, Axis::Length, len).unwrap();
    // The replay's pattern near the end of the card.
    assert!(at(11_241).fits && !at(11_242).fits && at(11_244).fits);
    assert!(!at(12_000).fits, "12,000 ran out of memory on the H100");
    let found = boundary(arch, w, rt, h100, Axis::Length).unwrap();
    let longest = found.longest.unwrap();
    // A value that runs, the next one not: a failure, not an island's top
    // taken for the answer; below the length that ran out of memory.
    assert!(at(longest).fits && !at(longest + 1).fits, "{longest}");
    assert!(longest < 12_000, "{longest}");
    // The island above is reported apart, with a top that runs.
    let top = found.runs_again_up_to.expect("longer lengths run again");
    assert!(
        top > longest + 1 && at(top).fits && !at(top + 1).fits,
        "{top}"
    );
    // The documented limit: the scan checks 32 evenly spaced lengths per
    // level, so a failure two tokens wide (11,242 and 11,243) can fall
    // between its checks. Here it does; the answer lies above it.
    assert!(SCAN_POINTS == 32 && longest > 11_243, "{longest}");
}

/// Where no capacity is reached below the boundary (a small model, a small
/// card), every length below the answer runs and the next one does not.
#[test]
fn far_from_the_card_s_end_every_length_below_the_answer_runs() {
    let spec = Spec::from_json(
        r#"{"model":"llama-3.2-1b","workload":{"mode":"inference","batch":1,"seq_len":512,"dtype":"bf16",
            "inference":{"kind":"forward","logits":"last"}}}"#,
    )
    .unwrap();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let cap = 8_000_000_000;
    let found = boundary(arch, w, rt, cap, Axis::Length).unwrap();
    let longest = found.longest.unwrap();
    let at = |len| probe_at(arch, w, rt, cap, Axis::Length, len).unwrap();
    assert!(at(longest).fits && !at(longest + 1).fits);
    for len in (1..longest).step_by(997) {
        assert!(at(len).fits, "{len}");
    }
}

/// Chunked ESMFold on an RTX 4090 (the card's limit emulated on an H100,
/// `measurements/emulated-cards/`): the GPU ran 1,200 residues by freeing
/// its cache at the card's end and ran out of memory at 1,356. The
/// replay's longest length lies between the two, and `gpus` still says
/// which lengths rely on the release
/// (`docs/decisions/esmfold-release-at-the-cards-end.md`).
#[test]
fn a_length_that_runs_only_through_freeing_the_cache_is_told_apart() {
    let spec = headroom_core::readers::Spec::from_json(
        r#"{"model":"esmfold-v1","workload":{"mode":"inference","dtype":"fp32","seq_len":1200,
            "esmfold":{"stem_dtype":"fp16","chunk_size":64,"num_recycles":4}}}"#,
    )
    .unwrap();
    let gpu = headroom_core::gpus::find("rtx-4090").unwrap();
    let fit =
        headroom_core::search::gpu_fit(gpu, &spec.model.arch, &spec.workload, &spec.runtime, 0)
            .unwrap();
    let longest = fit.max_length.unwrap();
    let without = fit
        .length_without_freeing_cache
        .expect("part of the answer needs the release");
    let (measured_run, measured_failure) = (1200, 1356);
    assert!(
        (measured_run..measured_failure).contains(&longest),
        "the replay's answer, {longest}, is between the measured run and failure"
    );
    assert!(without < longest, "{without}");
    assert!(without > 1000, "{without}");
}
