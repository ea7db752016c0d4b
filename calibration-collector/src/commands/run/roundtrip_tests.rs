//! `run`'s written workloads read back as the same workloads.

use super::single::{point_line, Measurement};
use super::*;

#[test]
fn written_workloads_parse_back_to_the_same_workload() {
    for (model, workload) in [
        (
            "llama-3.1-8b",
            r#"{"dtype": "bf16", "inference": {"kind": "generate", "new_tokens": 16}}"#,
        ),
        (
            "llama-3.2-1b",
            r#"{"mode": "training", "training": {"precision": "amp_bf16", "steps": 2}}"#,
        ),
        (
            "esmfold-v1",
            r#"{"esmfold": {"stem_dtype": "fp16", "chunk_size": 64, "num_recycles": 4}}"#,
        ),
        ("resnet-50", r#"{"dtype": "fp32"}"#),
    ] {
        let p = plan(&RunArgs {
            model: Some(model.into()),
            workload: Some(workload.into()),
            seq_lens: vec![256],
            ..RunArgs::default()
        })
        .unwrap();
        let written = &p.points[0].workload;
        let parsed = parse_workload(Some(written)).unwrap();
        let mut again = serde_json::to_value(&parsed).unwrap();
        if model == "esmfold-v1" {
            again.as_object_mut().unwrap().remove("attention");
        }
        assert_eq!(&again, written, "{model}");
    }
}

/// A `--capacity` point's line records the limit it ran under, and `check`
/// replays it under that limit: a point the core says runs out of memory
/// under it is predicted so again when read back.
#[test]
fn a_capacity_points_line_records_its_limit_and_reads_back_under_it() {
    let limit = 24_566_235_136;
    let p = plan(&RunArgs {
        model: Some("llama-3.1-8b".into()),
        workload: Some(r#"{"mode":"training","dtype":"bf16","training":{"grad_checkpointing":true,"lora":{"rank":16}}}"#.into()),
        seq_lens: vec![4221, 6000],
        capacity: Some(limit),
        ..RunArgs::default()
    })
    .unwrap();
    let device = crate::gpu::DeviceInfo {
        ordinal: 0,
        name: "NVIDIA H200".into(),
        total_bytes: 150_109_880_320,
        free_bytes: 150_000_000_000,
        compute_capability: "9.0".into(),
        uuid: None,
    };
    let versions = crate::gpu::DriverVersions {
        driver: Some("580.159.04".into()),
        cuda_driver_api: Some("13.0".into()),
    };
    for (point, runs) in p.points.iter().zip([true, false]) {
        assert_eq!(point.predicted["fits"], json!(runs), "{}", point.case);
        let m = Measurement {
            status: if runs { Status::Ok } else { Status::Oom },
            error: None,
            driver_peak: 20_000_000_000,
            process_peak: 20_000_000_000,
            peak_window: "process",
            baseline: 0,
            capacity: 150_109_880_320,
            poll: crate::gpu::PollStats::default(),
            process_seconds: 1.0,
            exit_code: Some(if runs { 0 } else { 3 }),
            result: None,
        };
        let line = point_line(point, &p.launcher, &device, &versions, &m);
        assert_eq!(line["allocator_limit_bytes"], json!(limit));
        let case = serde_json::to_string(&line).unwrap();
        let mut spec = headroom_core::readers::Spec::from_json(&case).unwrap();
        let mut history = headroom_core::readers::ProcessHistory::default();
        let e =
            headroom_core::readers::estimate_as_measured(&line, &mut spec, &mut history).unwrap();
        assert_eq!(e.fits, runs, "{}", point.case);
    }
}
