//! Memory over the job: the timeline's highest point is the estimate's
//! peak, its points are in order, and the phases follow one another.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate_with_timeline, EstimateOptions};
use headroom_core::timeline::{peak_index, MAX_POINTS};
use headroom_core::workload::{InferenceKind, Mode};
use headroom_core::{presets, RuntimeProfile, Workload};

fn jobs() -> Vec<(&'static str, Workload)> {
    let mut train = Workload::default();
    train.mode = Mode::Training;
    train.batch = 4;
    train.seq_len = 1024;
    train.training.steps = 3;
    let mut generate = Workload::default();
    generate.batch = 2;
    generate.seq_len = 2048;
    generate.inference.kind = InferenceKind::Generate;
    generate.inference.new_tokens = 64;
    // Beam search: its prompts repeated for each beam belong to the prefill.
    let mut beams = generate.clone();
    beams.inference.new_tokens = 8;
    beams.inference.num_beams = 4;
    let mut fold = Workload::default();
    fold.seq_len = 256;
    let mut vision = train.clone();
    vision.image_size = Some(224);
    vec![
        ("llama-3.2-1b", train.clone()),
        ("llama-3.1-8b", generate),
        ("qwen2.5-0.5b", beams),
        ("esmfold-v1", fold),
        ("resnet-50", vision),
        ("bert-base-uncased", train),
    ]
}

#[test]
fn the_highest_point_is_the_peak_and_points_are_in_order() {
    let runtime = RuntimeProfile::h200();
    for (id, w) in jobs() {
        let arch = presets::find(id).unwrap().arch;
        let (estimate, timeline) =
            estimate_with_timeline(&arch, &w, &runtime, EstimateOptions::default()).unwrap();
        let points = timeline.points();
        assert!(!points.is_empty() && points.len() <= MAX_POINTS, "{id}");
        let reserved = points.iter().map(|p| p.reserved).max().unwrap();
        let allocated = points.iter().map(|p| p.allocated).max().unwrap();
        assert_eq!(reserved, estimate.reserved_peak.0, "{id}");
        assert_eq!(allocated, estimate.allocated_peak.0, "{id}");
        // The op of the peak point (the highest allocated, the first of
        // equals) is the estimate's peak op.
        let top = &points[peak_index(points).unwrap()];
        assert_eq!(top.allocated, allocated, "{id}");
        assert!(
            estimate.peak_op.contains(top.op.name),
            "{id}: {} vs {}",
            estimate.peak_op,
            top.op.name
        );
        // Contiguous, every event covered once.
        assert_eq!(points[0].first_event, 0);
        for pair in points.windows(2) {
            assert_eq!(
                pair[0].first_event + pair[0].events,
                pair[1].first_event,
                "{id}"
            );
        }
        let covered: u64 = points.iter().map(|p| p.events).sum();
        assert_eq!(covered, timeline.events());
        // Phases in order: the step (or recycle) never goes back.
        let steps: Vec<u32> = points.iter().filter_map(|p| p.op.step).collect();
        assert!(steps.windows(2).all(|s| s[0] <= s[1]), "{id}: {steps:?}");
    }
}

#[test]
fn a_timeline_does_not_change_the_estimate() {
    let runtime = RuntimeProfile::h200();
    for (id, w) in jobs() {
        let arch = presets::find(id).unwrap().arch;
        let (with, _) =
            estimate_with_timeline(&arch, &w, &runtime, EstimateOptions::default()).unwrap();
        let without = headroom_core::estimate(&arch, &w, &runtime).unwrap();
        assert_eq!(with, without, "{id}");
    }
}

/// The phases of each kind of job, in the order they run.
#[test]
fn each_job_runs_its_phases_in_order() {
    use headroom_core::timeline::Phase::{self, *};
    let runtime = RuntimeProfile::h200();
    for (id, w) in jobs() {
        let arch = presets::find(id).unwrap().arch;
        let (_, timeline) =
            estimate_with_timeline(&arch, &w, &runtime, EstimateOptions::default()).unwrap();
        let spans = timeline.spans();
        assert_eq!(spans[0].first_event, 0, "{id}");
        assert!(
            spans
                .windows(2)
                .all(|s| s[0].first_event < s[1].first_event),
            "{id}: {spans:?}"
        );
        let phases: Vec<(Phase, Option<u32>)> = spans.iter().map(|s| (s.phase, s.step)).collect();
        let expected: Vec<(Phase, Option<u32>)> = match id {
            "llama-3.1-8b" | "qwen2.5-0.5b" => vec![(Load, None), (Prefill, None), (Decode, None)],
            "esmfold-v1" => {
                let mut recycles = vec![(Load, None)];
                recycles.extend((0..4).map(|r| (Forward, Some(r))));
                recycles.push((Forward, None));
                recycles
            }
            // Training: forward, backward, optimizer per step, until the
            // replay's state repeats.
            _ => {
                let steps = spans.iter().filter_map(|s| s.step).max().unwrap() + 1;
                let mut expected = vec![(Load, None)];
                for step in 0..steps {
                    expected.extend([Forward, Backward, Optimizer].map(|p| (p, Some(step))));
                }
                expected
            }
        };
        assert_eq!(phases, expected, "{id}");
        assert!(
            spans.iter().all(|s| s.first_event < timeline.events()),
            "{id}"
        );
    }
}

/// One count of steps: the estimate's peak op (`step 2: ...`, the
/// breakdown's and the JSON's words), the timeline's band at the peak
/// (`forward, step 2`) and the CSV's row for the peak (its phase and its
/// step column) name the same step, counted from 1; a fold's recycles the
/// same way.
#[test]
fn the_breakdown_the_timeline_and_the_csv_count_steps_alike() {
    use headroom_core::timeline::span_at;
    let runtime = RuntimeProfile::h200();
    let mut checked = 0;
    for (id, w) in jobs() {
        let arch = presets::find(id).unwrap().arch;
        let (estimate, timeline) =
            estimate_with_timeline(&arch, &w, &runtime, EstimateOptions::default()).unwrap();
        let Some((kind, rest)) = estimate.peak_op.split_once(' ') else {
            continue;
        };
        if kind != "step" && kind != "recycle" {
            continue;
        }
        let number: u32 = rest.split(':').next().unwrap().parse().unwrap();
        assert!(number >= 1, "{id}: {}", estimate.peak_op);
        let points = timeline.points();
        let peak = peak_index(points).unwrap();
        assert_eq!(points[peak].op.step.map(|s| s + 1), Some(number), "{id}");
        let span = span_at(timeline.spans(), points[peak].first_event).unwrap();
        assert_eq!(span.step_number(), Some(number), "{id}: {span:?}");
        assert!(
            span.label().ends_with(&format!("{kind} {number}")),
            "{id}: {} vs {}",
            span.label(),
            estimate.peak_op
        );
        let csv = timeline.csv(0);
        let row = csv.lines().nth(1 + peak).unwrap();
        assert!(
            row.contains(&format!("\"{}\",{number},", span.label())),
            "{id}: {row}"
        );
        checked += 1;
    }
    // The training jobs and the fold.
    assert!(checked >= 3, "{checked}");
}
