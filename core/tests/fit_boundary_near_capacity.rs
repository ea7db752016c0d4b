//! Near a card's end whether a job runs is not monotone in its length: the
//! replay of Llama 3.1 8B bf16 training with gradient checkpointing on an
//! H100's usable memory runs at 11,241 tokens, not at 11,242, again at
//! 11,244, and on and off above. The longest length reported is the
//! one below the first that does not run, never the top of an island (a
//! bisection answered 12,459; on the H100, 12,000 ran out of memory twice).

use headroom_core::search::{boundary, probe_at, Axis};
use headroom_core::spec::Spec;

fn llama_8b_training() -> Spec {
    Spec::from_json(
        r#"{"model":"llama-3.1-8b","workload":{"mode":"training","batch":1,"seq_len":4096,"dtype":"bf16",
            "training":{"optimizer":"adamw","precision":"bf16","grad_checkpointing":true}}}"#,
    )
    .unwrap()
}

#[test]
fn the_longest_length_is_below_the_first_failure_not_an_island() {
    let spec = llama_8b_training();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let h100 = headroom_core::gpus::find("h100-80gb").unwrap().usable_bytes;
    let at = |len| probe_at(arch, w, rt, h100, Axis::Length, len).unwrap();
    // The pattern the answer must respect.
    assert!(at(11_241).fits);
    assert!(!at(11_242).fits);
    assert!(at(11_244).fits);
    assert!(!at(12_000).fits);
    let found = boundary(arch, w, rt, h100, Axis::Length).unwrap();
    assert_eq!(found.longest, Some(11_241));
    let top = found.runs_again_up_to.expect("a longer length runs again");
    assert!(top > 11_242 && at(top).fits && !at(top + 1).fits, "{top}");
    // Every length the search can have skipped below the answer still runs
    // at a stride of 7 (a check of the answer, not of the search's steps).
    for len in (1..=11_241).rev().step_by(7).take(200) {
        assert!(at(len).fits, "{len} does not run");
    }
}
