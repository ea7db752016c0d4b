//! Jobs that run after another job in the same process (`estimate_after`).
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate_after, replay_earlier_jobs, Component, EarlierJob};
use headroom_core::trace::Replay;
use headroom_core::workload::{Mode, Precision};
use headroom_core::{estimate, presets, Bytes, RuntimeProfile, Workload};

fn llama_1b() -> headroom_core::arch::Architecture {
    presets::find("llama-3.2-1b").unwrap().arch
}

fn training(batch: u32, seq_len: u32, resident: bool) -> Workload {
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = batch;
    w.seq_len = seq_len;
    w.training.precision = Precision::AmpBf16;
    w.training.optimizer_state_resident = resident;
    w
}

/// An inference job after an identical one finds the weights and the
/// workspaces where a fresh process would have put them: the same estimate
/// as a fresh process's (one that never ran a backward pass, as the
/// earlier job says).
#[test]
fn inference_after_inference_is_a_fresh_estimate() {
    let arch = llama_1b();
    let mut w = Workload::default();
    w.seq_len = 2048;
    let mut rt = RuntimeProfile::h200();
    rt.process_ran_backward = false;
    let fresh = estimate(&arch, &w, &rt).unwrap();
    let after = estimate_after(&arch, &w, &w, &rt).unwrap();
    assert_eq!(after, fresh);
}

/// A training job after another keeps one copy of the weights and of the
/// optimizer state (adopted, not allocated again: a second copy would be
/// 2.47 GB and 4.94 GB here), and its breakdown still adds up to the driver
/// peak.
#[test]
fn training_after_training_adopts_weights_and_state() {
    let arch = llama_1b();
    let rt = RuntimeProfile::h200();
    let first = training(4, 512, false);
    let later = training(4, 1024, true);
    let alone = estimate(&arch, &later, &rt).unwrap();
    let after = estimate_after(&arch, &first, &later, &rt).unwrap();
    let mib = 1 << 20;
    let near = |a: Bytes, b: Bytes, within: u64| a.0.abs_diff(b.0) <= within;
    // The earlier job was its process's first (cuBLAS's workspaces created
    // at its first matrix multiplies, among its activations): the later
    // one's peak moment differs from a lone job's by 1 MiB of the weights
    // component (autocast's cached casts count there) and 1 MiB of
    // activations.
    assert!(near(
        after.component(Component::Weights),
        alone.component(Component::Weights),
        mib
    ));
    assert_eq!(
        after.component(Component::OptimizerState),
        alone.component(Component::OptimizerState)
    );
    let sum: u64 = after.breakdown.iter().map(|s| s.bytes.0).sum();
    assert_eq!(sum, after.driver_peak.0);
    // The state the first job laid out among its freed activations changes
    // where the rest lands, by a few segments either way.
    assert!(near(after.allocated_peak, alone.allocated_peak, 2 * mib));
    assert!(
        after.reserved_peak.0.abs_diff(alone.reserved_peak.0) < alone.reserved_peak.0 / 100,
        "{} after, {} alone",
        after.reserved_peak.0,
        alone.reserved_peak.0
    );
}

/// A bad earlier job is reported like a bad job.
#[test]
fn a_bad_earlier_job_is_an_error() {
    let arch = llama_1b();
    let mut bad = Workload::default();
    bad.batch = 0;
    let err =
        estimate_after(&arch, &bad, &Workload::default(), &RuntimeProfile::h200()).unwrap_err();
    assert!(err.to_string().contains("workload.batch"), "{err}");
}

/// The library workspaces belong to the process: a job after another takes
/// the ones the earlier job created, whatever their order (a fresh
/// process's cuBLASLt workspace, made at BERT's first `addmm` with a bias,
/// sits between the two cuBLAS ones), and frees or makes none. The H200
/// trace of BERT fp32 training after amp training in one process
/// (`measurements/h200-generalization/trace-segments-29.jsonl.gz`) starts
/// with the embedding's blocks; the replay had freed the autograd thread's
/// workspace and made it again, 1 GB under in reserved memory.
#[test]
fn a_later_job_takes_the_workspaces_the_earlier_one_made() {
    let arch = presets::find("bert-base-uncased").unwrap().arch;
    let mut amp = Workload::default();
    amp.mode = Mode::Training;
    amp.batch = 32;
    amp.seq_len = 128;
    amp.training.precision = Precision::AmpBf16;
    let mut fp32 = amp.clone();
    fp32.batch = 16;
    fp32.seq_len = 512;
    fp32.training.precision = Precision::Fp32;
    fp32.training.optimizer_state_resident = true;
    let runtime = RuntimeProfile::h200();
    let mut r = Replay::new(runtime.allocator, None);
    let earlier = [EarlierJob {
        arch: &arch,
        workload: &amp,
    }];
    replay_earlier_jobs(&earlier, &arch, &fp32, &runtime, Default::default(), &mut r).unwrap();
    r.event_log = Some(Vec::new());
    headroom_core::families::replay(&arch, &fp32, &runtime, &mut r).unwrap();
    let events = r.event_log.take().unwrap();
    let workspace_events: Vec<_> = events
        .iter()
        .filter(|(_, _, _, op)| op.name.starts_with("cuBLAS"))
        .collect();
    assert!(
        workspace_events.is_empty(),
        "the later job touched the workspaces: {workspace_events:?}"
    );
    assert_eq!(events[0].3.name, "embeddings");
}

/// Jobs of several models in one process, as a notebook runs them
/// (`measurements/shared-process/measured-notebook-a.jsonl`, H200, traced):
/// GPT-2 fp32 training, then BERT, ResNet-50 (b64, b256) and ViT-B/16
/// inference, each model dropped and the cache emptied before the next.
/// The autograd thread's cuBLAS workspace, created at GPT-2's first
/// backward matmul inside a freed 1,572 MiB block, keeps that segment
/// reserved for the rest of the process, and every later model's weights
/// and activations land in it: each later reserved peak is the measured
/// one to the byte, where a fresh process would reserve far less for BERT
/// (1,174 MiB measured alone, `measurements/h200/validation.jsonl`'s
/// repro case; 1,608 here).
#[test]
fn later_models_fill_the_segment_an_earlier_training_left_reserved() {
    use headroom_core::estimate::{estimate_in_process, EarlierJob};
    use headroom_core::readers::Spec;
    let lines = include_str!("../../../measurements/shared-process/measured-notebook-a.jsonl");
    let cases: Vec<(Spec, serde_json::Value)> = lines
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (Spec::from_value(&v).unwrap(), v)
        })
        .collect();
    assert_eq!(cases.len(), 5);
    for i in 0..cases.len() {
        let (spec, case) = &cases[i];
        let earlier: Vec<EarlierJob> = cases[..i]
            .iter()
            .map(|(s, _)| EarlierJob {
                arch: &s.model.arch,
                workload: &s.workload,
            })
            .collect();
        let e = estimate_in_process(
            &earlier,
            &spec.model.arch,
            &spec.workload,
            &spec.runtime,
            Default::default(),
        )
        .unwrap();
        let measured = &case["measured"];
        assert_eq!(
            e.reserved_peak.0,
            measured["reserved_peak"].as_u64().unwrap(),
            "{}",
            case["case"]
        );
        let allocated = measured["alloc_peak"].as_u64().unwrap();
        assert!(
            e.allocated_peak.0.abs_diff(allocated) <= 1 << 20,
            "{}: allocated {} predicted, {allocated} measured",
            case["case"],
            e.allocated_peak.0
        );
    }
    // Alone, BERT's reserved peak is far below what it reaches after GPT-2.
    let (bert, _) = &cases[1];
    let alone = estimate(&bert.model.arch, &bert.workload, &bert.runtime).unwrap();
    assert!(alone.reserved_peak.0 + (300 << 20) < 1_686_110_208);
}

/// A job after another model's: that model's weights and optimizer state
/// are gone (its weights are not adopted by the next model, even of the
/// same size), and its cuBLAS workspaces stay.
#[test]
fn another_model_s_weights_are_dropped_and_its_workspaces_kept() {
    use headroom_core::estimate::{estimate_in_process, EarlierJob};
    let bert = presets::find("bert-base-uncased").unwrap().arch;
    let gpt2 = presets::find("gpt2").unwrap().arch;
    let mut inference = Workload::default();
    inference.batch = 8;
    inference.seq_len = 128;
    inference.inference.kind = headroom_core::workload::InferenceKind::Forward;
    let train = training(4, 512, false);
    let rt = RuntimeProfile::h200();
    let earlier = [EarlierJob {
        arch: &gpt2,
        workload: &train,
    }];
    let after = estimate_in_process(&earlier, &bert, &inference, &rt, Default::default()).unwrap();
    let alone = estimate(&bert, &inference, &rt).unwrap();
    // None of GPT-2's weights (248 MB in bf16) or AdamW state: BERT's
    // allocated peak is a fresh BERT's, give or take the cuBLASLt workspace
    // GPT-2 made and a few MiB of remainders the allocator does not split
    // off blocks cut from GPT-2's segments.
    assert_eq!(after.component(Component::OptimizerState), Bytes(0));
    assert!(
        after.allocated_peak.0.abs_diff(alone.allocated_peak.0) <= 8 << 20,
        "{} after, {} alone",
        after.allocated_peak.0,
        alone.allocated_peak.0
    );
    // Both of the process's cuBLAS workspaces, as a process that ran a
    // backward pass holds them, and the cuBLASLt workspace GPT-2's first
    // biased matmul made.
    assert_eq!(
        after.component(Component::LibraryWorkspace),
        alone.component(Component::LibraryWorkspace) + Bytes(1 << 20)
    );
}

/// A `run --cmd` measurement whose window is the whole process
/// (`measured.peak_window: "process"`) is checked against the whole job,
/// its load included, as `estimate` predicts it; a case window replays the
/// case after the load's cache was emptied.
#[test]
fn a_whole_process_measurement_is_checked_with_its_load() {
    use headroom_core::readers::{estimate_as_measured, ProcessHistory, Spec};
    let case = |window: &str| {
        serde_json::json!({"case": "build_then_cast", "model": "llama-3.2-1b",
            "workload": {"mode": "inference", "batch": 1, "seq_len": 4096, "dtype": "bf16",
                         "load": "build_then_cast", "inference": {"kind": "forward", "logits": "last"}},
            "runtime": {"process_ran_backward": false},
            "measured": {"driver_peak": 1, "peak_window": window}})
    };
    let checked = |window: &str| {
        let case = case(window);
        let mut spec = Spec::from_value(&case).unwrap();
        let mut history = ProcessHistory::default();
        estimate_as_measured(&case, &mut spec, &mut history).unwrap()
    };
    let spec = Spec::from_value(&case("process")).unwrap();
    let whole_job = estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
    let process = checked("process");
    assert_eq!(process.reserved_peak, whole_job.reserved_peak);
    assert_eq!(process.driver_peak, whole_job.driver_peak);
    // The fp32 build's freed copies stay cached through the job.
    let after_load = checked("case");
    assert!(
        process.reserved_peak.0 > after_load.reserved_peak.0 + 1_500_000_000,
        "{:?} vs {:?}",
        process.reserved_peak,
        after_load.reserved_peak
    );
}
