//! Smaller cards emulated on an H100 (`run --capacity`: torch's allocator
//! limited to a card's usable memory less the job's bytes outside it),
//! measured 2026-12-07 (`measurements/emulated-cards/`): whether each point
//! ran or ran out of memory, against the replay under the same limit.
//!
//! Every point agrees. Chunked ESMFold at 1,356 residues under the RTX
//! 4090's limit ran out of memory on the GPU, as the replay now says, since
//! the distogram between recycles allocates its tensors as PyTorch does
//! (`docs/decisions/esmfold-release-at-the-cards-end.md`).

use calibration_collector::commands::run::fresh_process_prediction;
use headroom_core::readers::Spec;
use serde_json::Value;

const FILES: [&str; 5] = [
    "measured-call1.jsonl",
    "measured-call2.jsonl",
    "measured-call4.jsonl",
    "measured-call5.jsonl",
    "measured-call6.jsonl",
];

#[test]
fn emulated_cards_run_and_fail_where_the_replay_says() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../measurements/emulated-cards"
    );
    let (mut agreed, mut missed) = (Vec::new(), Vec::new());
    for file in FILES {
        let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let case: Value = serde_json::from_str(line).unwrap();
            let name = case["case"].as_str().unwrap().to_string();
            let limit = case["allocator_limit_bytes"].as_u64().expect("a limit");
            let ran = match case["measured"]["status"].as_str() {
                Some("ok") => true,
                Some("oom") => false,
                other => panic!("{name}: status {other:?}"),
            };
            let spec = Spec::from_value(&case).unwrap();
            let predicted = fresh_process_prediction(&spec.model.arch, &spec.workload, Some(limit));
            let fits = predicted["fits"]
                .as_bool()
                .expect("a prediction under a limit");
            if fits == ran {
                agreed.push(name);
            } else {
                missed.push(name);
            }
        }
    }
    assert!(missed.is_empty(), "missed: {missed:?}, agreed: {agreed:?}");
    // The H100's narrow failures (10,751 and 11,234 tokens fail, 10,752 and
    // 11,237 run) are among the points that agree.
    for island in ["L10751", "L10752", "L11234", "L11237"] {
        assert!(agreed.iter().any(|n| n.ends_with(island)), "{island}");
    }
    assert!(agreed.len() >= 25, "{}", agreed.len());
}
