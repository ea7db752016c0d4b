//! Unit tests of `run`: plans, commands, exit codes, result lines.

use super::single::{classify_exit, command_for, HARNESS};
use super::*;
use crate::template::Template;
use std::path::Path;

fn args() -> RunArgs {
    RunArgs {
        seq_lens: vec![64, 128],
        batches: vec![1, 2],
        ..RunArgs::default()
    }
}

#[test]
fn plans_points_in_batch_then_length_order() {
    let p = plan(&RunArgs {
        model: Some("esmfold-v1".into()),
        ..args()
    })
    .unwrap();
    let names: Vec<&str> = p.points.iter().map(|p| p.case.as_str()).collect();
    assert_eq!(
        names,
        [
            "esmfold-v1_inference_b1_L64",
            "esmfold-v1_inference_b1_L128",
            "esmfold-v1_inference_b2_L64",
            "esmfold-v1_inference_b2_L128"
        ]
    );
    // ESMFold defaults to an fp32 trunk; the workload is written in full.
    assert_eq!(p.points[0].workload["dtype"], "fp32");
    assert_eq!(p.points[0].workload["esmfold"]["stem_dtype"], "fp16");
    assert!(p.points[0].workload.get("attention").is_none());
    assert_eq!(p.points[3].workload["seq_len"], 128);
    assert_eq!(p.points[3].workload["batch"], 2);
}

#[test]
fn vision_lengths_are_image_sizes() {
    let p = plan(&RunArgs {
        model: Some("resnet-50".into()),
        seq_lens: vec![224],
        batches: vec![8],
        ..RunArgs::default()
    })
    .unwrap();
    assert_eq!(p.points[0].case, "resnet-50_inference_b8_r224");
    assert_eq!(p.points[0].workload["image_size"], 224);
}

#[test]
fn rejects_bad_sweeps_naming_the_flag() {
    let e = plan(&RunArgs {
        model: Some("gpt2".into()),
        seq_lens: vec![0],
        ..RunArgs::default()
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("--seq-lens: 0 is out of range"),
        "{e}"
    );
    let e = plan(&RunArgs {
        seq_lens: vec![1],
        ..RunArgs::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("give --model"), "{e}");
    let e = plan(&RunArgs {
        cmd: Some("python job.py --batch {batch}".into()),
        ..args()
    })
    .unwrap_err();
    assert!(e.to_string().contains("no {seq_len} placeholder"), "{e}");
    let e = plan(&RunArgs {
        model: Some("gpt2".into()),
        workload: Some("{\"batch\": \"x\"}".into()),
        ..args()
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("--workload: `workload.batch`"),
        "{e}"
    );
    let e = plan(&RunArgs {
        model: Some("nope".into()),
        ..args()
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("--model: `model`: unknown preset `nope`"),
        "{e}"
    );
}

#[test]
fn cmd_points_render_quoted_commands() {
    let p = plan(&RunArgs {
        cmd: Some("python my_job.py --len {seq_len} --batch {batch} --tag {case}".into()),
        name: Some("my job".into()),
        ..args()
    })
    .unwrap();
    let (_, shown) = command_for(&p.launcher, &p.points[1], Path::new("h.py")).unwrap();
    assert_eq!(
        shown,
        "python my_job.py --len 128 --batch 1 --tag 'my job_b1_L128'"
    );
    assert_eq!(p.points[0].predicted["skipped"], "no model given");
}

#[test]
fn builtin_points_pass_the_case_as_one_argument() {
    let p = plan(&RunArgs {
        model: Some("gpt2".into()),
        seq_lens: vec![256],
        ..RunArgs::default()
    })
    .unwrap();
    let (cmd, shown) = command_for(&p.launcher, &p.points[0], Path::new("/tmp/h m.py")).unwrap();
    let argv: Vec<String> = cmd
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(argv[0], "/tmp/h m.py");
    assert_eq!(argv[1], "--case-json");
    let case: Value = serde_json::from_str(&argv[2]).unwrap();
    assert_eq!(case["model"], "gpt2");
    assert_eq!(case["workload"]["seq_len"], 256);
    assert!(
        shown.starts_with("python3 '/tmp/h m.py' --case-json '{"),
        "{shown}"
    );
}

#[test]
fn exits_are_classified() {
    let builtin = Launcher::Builtin { python: "p".into() };
    let cmd = Launcher::Cmd {
        template: Template::parse("x").unwrap(),
        text: "x".into(),
    };
    assert_eq!(classify_exit(&builtin, Some(0), None, "").0, Status::Ok);
    assert_eq!(classify_exit(&builtin, Some(3), None, "").0, Status::Oom);
    let (s, e) = classify_exit(
        &builtin,
        Some(2),
        Some(&json!({"measured": {"unsupported": "ESMFold training"}})),
        "",
    );
    assert_eq!(s, Status::Failed);
    assert!(e.unwrap().contains("ESMFold training"));
    assert_eq!(
        classify_exit(
            &cmd,
            Some(1),
            None,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
        )
        .0,
        Status::Oom
    );
    let (s, e) = classify_exit(&cmd, Some(1), None, "Traceback\nValueError: bad");
    assert_eq!(s, Status::Failed);
    assert_eq!(e.unwrap(), "exit code 1: ValueError: bad");
    assert_eq!(classify_exit(&cmd, None, None, "").0, Status::Failed);
    assert_eq!(
        classify_exit(&cmd, Some(0), Some(&json!({"measured": {"oom": true}})), "").0,
        Status::Oom
    );
}

#[test]
fn the_harness_is_embedded() {
    assert!(HARNESS.contains("HEADROOM_RESULT"));
    assert!(HARNESS.contains("--case-json"));
}

/// A `--cmd` sweep of a custom architecture writes that architecture into
/// its measurement lines (it had written `"model": "custom"`, which `check`
/// refused to read back); a preset keeps its canonical id.
#[test]
fn measurement_lines_name_a_custom_model_as_given() {
    let dir = std::env::temp_dir().join(format!("headroom-run-custom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("resnet34.json");
    let arch = json!({"family": "cnn", "name": "ResNet-34", "topology": "res_net",
        "blocks": [3, 4, 6, 3], "bottleneck": false, "num_classes": 1000});
    std::fs::write(
        &spec,
        json!({"model": arch, "workload": {"mode": "training", "batch": 8, "image_size": 224}})
            .to_string(),
    )
    .unwrap();
    let p = plan(&RunArgs {
        cmd: Some("python3 job.py --batch {batch}".into()),
        spec: Some(spec.to_string_lossy().into_owned()),
        seq_lens: vec![224],
        batches: vec![8],
        ..RunArgs::default()
    })
    .unwrap();
    let point = &p.points[0];
    assert_eq!(point.model.as_deref(), Some("custom"));
    assert_eq!(point.model_spec.as_ref(), Some(&arch));
    // `check` reads the line back to the same model and prediction.
    let line = json!({"case": point.case, "model": point.model_spec, "workload": point.workload,
        "measured": {"driver_peak": 1_000_000_000u64}});
    let records = crate::cases::parse_records("line", &line.to_string()).unwrap();
    match crate::cases::classify(&records[0]).unwrap() {
        crate::cases::Classified::Case(case) => {
            let spec = headroom_core::readers::Spec::from_value(&case.value).unwrap();
            assert_eq!(spec.model.arch, parse_model(Some(&arch)).unwrap().arch);
        }
        _ => panic!("a measurement case"),
    }
    let preset = plan(&RunArgs {
        model: Some("ResNet_50".into()),
        ..args()
    })
    .unwrap();
    assert_eq!(preset.points[0].model_spec, Some(json!("resnet-50")));
    std::fs::remove_dir_all(&dir).ok();
}
