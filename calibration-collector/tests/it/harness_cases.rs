//! The measuring harness reads every case the collector can send. A field
//! the Rust side adds (or sends as null) that the harness cannot read fails
//! here, without a GPU: every preset under every kind of workload (`run
//! --dry-run`'s cases, `--capacity` included) and every committed
//! measurement file (what `--batch` reads back) go through the harness's
//! `--check-cases`, which reads each case as a run does and builds its
//! model's Hugging Face config (transformers, no torch).
//!
//! Python: `HEADROOM_HARNESS_PYTHON`, else the one scripts/setup.sh
//! installs with transformers, else `python3`.

use calibration_collector::commands::run::single::{case_json, HARNESS};
use calibration_collector::commands::run::{plan, RunArgs};
use serde_json::{json, Value};
use std::process::Command;

fn python() -> String {
    if let Ok(p) = std::env::var("HEADROOM_HARNESS_PYTHON") {
        return p;
    }
    // Where scripts/setup.sh puts it, for a plain `cargo test`.
    let tools = std::env::var("HEADROOM_TOOLS_DIR").map_or_else(
        |_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/headroom-tools")
        },
        std::path::PathBuf::from,
    );
    let venv = tools.join("harness-venv/bin/python");
    if venv.exists() {
        return venv.to_string_lossy().into_owned();
    }
    "python3".into()
}

/// Runs the harness's `--check-cases` on `cases`; its report.
fn check_cases(cases: &[Value]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let harness = dir.path().join("headroom_measure.py");
    std::fs::write(&harness, HARNESS).unwrap();
    let file = dir.path().join("cases.jsonl");
    let lines: Vec<String> = cases.iter().map(Value::to_string).collect();
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = Command::new(python())
        .arg(&harness)
        .arg("--check-cases")
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python()));
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !report.contains("--check-cases needs transformers"),
        "{report}\nrun scripts/test.sh, or set HEADROOM_HARNESS_PYTHON to a Python with transformers"
    );
    (out.status.success(), report)
}

/// The workloads a sweep can run, one of each kind.
fn workloads() -> Vec<Value> {
    vec![
        json!({}),
        json!({"mode": "inference", "dtype": "bf16", "inference": {"kind": "generate", "new_tokens": 4}}),
        json!({"mode": "inference", "inference": {"kind": "forward", "logits": "all", "kv_cache": false}}),
        json!({"mode": "inference", "head": "sequence_classification", "num_labels": 3}),
        json!({"mode": "inference", "head": "token_classification"}),
        json!({"mode": "training", "training": {"optimizer": "adamw", "steps": 2, "precision": "amp_bf16"}}),
        json!({"mode": "training", "dtype": "bf16", "training": {"optimizer": "sgd", "momentum": 0.9,
               "precision": "bf16", "grad_checkpointing": true}}),
        json!({"mode": "training", "dtype": "bf16", "training": {"precision": "bf16",
               "lora": {"rank": 16, "target_modules": ["q_proj", "v_proj"]}}}),
        json!({"mode": "training", "head": "sequence_classification", "training": {"precision": "amp_fp16"}}),
        json!({"mode": "inference", "dtype": "fp32", "esmfold": {"chunk_size": 64, "num_recycles": 1}}),
    ]
}

#[test]
fn the_harness_reads_every_case_a_sweep_sends() {
    let mut cases = Vec::new();
    for preset in headroom_core::presets::all() {
        for workload in workloads() {
            for capacity in [None, Some(24_000_000_000)] {
                let args = RunArgs {
                    model: Some(preset.id.to_string()),
                    workload: Some(workload.to_string()),
                    seq_lens: vec![if preset.arch.is_vision() { 224 } else { 128 }],
                    batches: vec![2],
                    capacity,
                    ..RunArgs::default()
                };
                // Combinations the core refuses (LoRA on ESMFold, a head on
                // a vision model, ...) are never sent.
                if let Ok(p) = plan(&args) {
                    cases.extend(p.points.iter().map(case_json));
                }
            }
        }
    }
    assert!(cases.len() > 500, "only {} cases planned", cases.len());
    let (ok, report) = check_cases(&cases);
    assert!(ok, "{report}");
    let read = report.lines().filter(|l| l.starts_with("ok ")).count();
    // Every preset the harness builds is read under several workloads; the
    // others are refused as a run would record them, by name.
    assert!(read > 300, "{read} cases read\n{report}");
    for line in report.lines().filter(|l| l.starts_with("unsupported ")) {
        assert!(
            line.contains("unknown model id") || line.contains("has no"),
            "{line}"
        );
    }
    // A null sent for a field with a default reads as the default.
    assert!(
        report.contains("ok bert-base-uncased_inference_b2_L128: BertForSequenceClassification"),
        "{report}"
    );
}

#[test]
fn the_harness_reads_the_committed_measurements_back() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cases = Vec::new();
    for file in [
        "measurements/public/h200-public.jsonl",
        "measurements/h200/validation.jsonl",
        "measurements/real-jobs-2/measured.jsonl",
    ] {
        let path = root.join(file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        for line in text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let mut case: Value = serde_json::from_str(line).unwrap();
            if case.get("workload").is_none() {
                continue; // a file's runtime line
            }
            case.as_object_mut().unwrap().remove("measured");
            cases.push(case);
        }
    }
    assert!(cases.len() > 50, "{}", cases.len());
    let (ok, report) = check_cases(&cases);
    assert!(ok, "{report}");
}
