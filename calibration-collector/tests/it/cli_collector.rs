//! CLI tests of probe/run/fit without a GPU: the no-driver path, `--cmd`
//! templating and quoting through `run --dry-run`, `fit` on synthetic points.

use crate::common;

use common::{data, run, skip, text};
use headroom_core::estimate::estimate;
use headroom_core::readers::Spec;
use serde_json::{json, Value};

#[test]
fn every_command_has_help() {
    let commands = [
        "estimate",
        "gpus",
        "check",
        "probe",
        "run",
        "calibrate",
        "fit",
        "upload",
    ];
    let top = run(&["--help"], None);
    assert!(text(&top.stdout).contains("Usage: headroom <COMMAND>"));
    for cmd in commands {
        assert!(
            text(&top.stdout).contains(&format!("\n  {cmd} ")),
            "`headroom --help` lists {cmd}"
        );
        let out = run(&[cmd, "--help"], None);
        assert_eq!(out.status.code(), Some(0), "{cmd}");
        assert!(
            text(&out.stdout).contains(&format!("Usage: headroom {cmd}")),
            "{cmd}"
        );
    }
}

#[test]
fn without_a_driver_gpu_commands_exit_2_with_one_clear_line() {
    if calibration_collector::gpu::driver_present() {
        skip("this machine has an NVIDIA driver");
        return;
    }
    for args in [
        vec!["probe"],
        vec!["probe", "--json"],
        vec!["run", "--model", "gpt2", "--seq-lens", "128"],
    ] {
        let out = run(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: no NVIDIA driver found"), "{err}");
        assert!(!err.contains("panicked"));
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn run_dry_run_templates_and_quotes_the_command() {
    let out = run(
        &[
            "run",
            "--cmd",
            "python my_job.py --len {seq_len} --batch {batch} --tag {case}",
            "--seq-lens",
            "512,1024",
            "--batches",
            "2",
            "--name",
            "it's mine",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(
        lines,
        [
            "# it's mine_b2_L512: no prediction (no model given)",
            "python my_job.py --len 512 --batch 2 --tag \"it's mine_b2_L512\"",
            "# it's mine_b2_L1024: no prediction (no model given)",
            "python my_job.py --len 1024 --batch 2 --tag \"it's mine_b2_L1024\"",
        ]
    );
    // The rendered command really is one argument per placeholder.
    let words = shlex::split(&lines[1]).unwrap();
    assert_eq!(words.last().unwrap(), "it's mine_b2_L512");
}

#[test]
fn run_rejects_bad_templates_and_sweeps() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--cmd", "job --len {length}", "--seq-lens", "1"],
            "unknown placeholder `{length}`",
        ),
        (
            &["--cmd", "sh -c 'job {seq_len}'", "--seq-lens", "1"],
            "inside quotes",
        ),
        (
            &["--cmd", "job", "--seq-lens", "1,2"],
            "no {seq_len} placeholder",
        ),
        (
            &["--model", "gpt2", "--seq-lens", "0"],
            "--seq-lens: 0 is out of range",
        ),
        (
            &[
                "--model",
                "gpt2",
                "--workload",
                "{\"dtype\": \"fp8\"}",
                "--seq-lens",
                "8",
            ],
            "workload.dtype",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["run", "--dry-run"];
        full.extend_from_slice(args);
        let out = run(&full, None);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains(needle),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn run_range_checks_its_numeric_flags_before_touching_a_gpu() {
    for (flag, value, needle) in [
        (
            "--poll-interval-us",
            "0",
            "error: --poll-interval-us: 0 is out of range; allowed: integers from 50 to 1000000 (microseconds)",
        ),
        (
            "--poll-interval-us",
            "18446744073709551615",
            "error: --poll-interval-us: 18446744073709551615 is out of range",
        ),
        (
            "--timeout-s",
            "0",
            "error: --timeout-s: 0 is out of range; allowed: integers from 1 to 604800 (seconds)",
        ),
        (
            "--timeout-s",
            "604801",
            "error: --timeout-s: 604801 is out of range",
        ),
    ] {
        // With and without --dry-run (the flag is checked before the driver,
        // so a machine without a GPU says the same), one GPU and several.
        for extra in [&["--dry-run"][..], &[], &["--nproc", "2"]] {
            let mut args = vec!["run", "--model", "gpt2", "--seq-lens", "8", flag, value];
            args.extend_from_slice(extra);
            let out = run(&args, None);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.starts_with(needle), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    let out = run(
        &[
            "run",
            "--cmd",
            "job {seq_len}",
            "--seq-lens",
            "8",
            "--poll-interval-us",
            "50",
            "--timeout-s",
            "604800",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn run_dry_run_with_a_preset_shows_the_harness_case() {
    let out = run(
        &[
            "run",
            "--model",
            "llama-3.1-8b",
            "--workload",
            "{\"dtype\":\"bf16\"}",
            "--seq-lens",
            "2048",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let cmd = shown.lines().nth(1).unwrap();
    let words = shlex::split(cmd).unwrap();
    assert_eq!(words[0], "python3");
    assert_eq!(words[2], "--case-json");
    let case: Value = serde_json::from_str(&words[3]).unwrap();
    assert_eq!(case["case"], "llama-3.1-8b_inference_b1_L2048");
    assert_eq!(case["workload"]["seq_len"], 2048);
    assert_eq!(case["workload"]["dtype"], "bf16");
}

/// Synthetic measurements: the core's predicted reserved peak plus known
/// outside-allocator overheads (0 to 2 MiB of deterministic noise), two
/// points per case of the sample, every one of which the core models.
fn synthetic_points(inference_overhead: u64, backward: u64) -> String {
    let public = std::fs::read_to_string(data("h200-sample.jsonl")).unwrap();
    let mut lines = Vec::new();
    let mut i = 0u64;
    for line in public.lines() {
        let mut case: Value = serde_json::from_str(line).unwrap();
        if case["case"] == "runtime_overheads" {
            continue;
        }
        // Each synthetic point is a fresh process, as `run` measures them.
        if let Some(rt) = case.get_mut("runtime").and_then(Value::as_object_mut) {
            rt.insert("process_ran_backward".into(), json!(false));
        }
        let name = case["case"].as_str().unwrap().to_string();
        let spec = Spec::from_value(&case).unwrap_or_else(|e| panic!("{name}: {e}"));
        let est = estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let reserved = est.driver_peak.0 - est.outside_allocator.0;
        for batch in [1, 2] {
            i += 1;
            let training = spec.workload.mode == headroom_core::workload::Mode::Training;
            let noise = (i * 7919 % 3) << 20; // 0, 1 or 2 MiB
            let mut c = case.clone();
            c["case"] = json!(format!("{name}_{batch}"));
            c["measured"] = json!({
                "driver_peak": reserved + inference_overhead + if training { backward } else { 0 } + noise,
                "reserved_peak": reserved,
            });
            lines.push(c.to_string());
        }
    }
    assert_eq!(lines.len(), 10, "two points per case of the sample");
    lines.join("\n") + "\n"
}

#[test]
fn fit_recovers_known_coefficients_from_synthetic_points() {
    let inference = 700_000_000;
    let backward = 90_000_000;
    let points = synthetic_points(inference, backward);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("synthetic.jsonl");
    std::fs::write(&input, points).unwrap();
    let out_path = dir.path().join("profile.json");
    let out = run(
        &[
            "fit",
            input.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
            "--name",
            "synthetic H200",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let last = report.lines().last().unwrap();
    assert!(
        last.starts_with("cases=") && last.contains(" median_abs_err="),
        "{last}"
    );
    let profile: Value =
        serde_json::from_str(&std::fs::read_to_string(&out_path).unwrap()).unwrap();
    let rt = &profile["runtime"];
    let sum = rt["cuda_context_bytes"].as_u64().unwrap()
        + rt["cublas_library_bytes"].as_u64().unwrap()
        + rt["model_kernels_bytes"].as_u64().unwrap();
    let mib = 1u64 << 20;
    // Noise is 0..2 MiB: the fit lands within 2 MiB.
    assert!(
        sum.abs_diff(inference) <= 2 * mib,
        "inference overhead {sum} vs {inference}"
    );
    let coef = &profile["coefficients"];
    assert!(coef["model_kernels_bytes"]["uncertainty"].as_u64().unwrap() <= 4 * mib);
    assert_eq!(profile["fit"]["basis"], "torch_reserved");
    assert_eq!(profile["fit"]["points_used"], 10, "{}", profile["fit"]);
    // The sample's training case gives points with a backward pass: the
    // backward coefficient is fitted from them, not kept at the prior.
    let backward_cases = coef["backward_library_bytes"]["cases"].as_array().unwrap();
    assert_eq!(
        backward_cases.len(),
        2,
        "{}",
        coef["backward_library_bytes"]
    );
    let b = rt["backward_library_bytes"].as_u64().unwrap();
    assert!(
        b.abs_diff(backward) <= 2 * mib,
        "backward {b} vs {backward}"
    );
    // The written profile validates and `check --profile` uses it.
    calibration_collector::profile::parse(
        &std::fs::read_to_string(&out_path).unwrap(),
        &calibration_collector::profile::Identity::default(),
    )
    .unwrap();
    let out = run(
        &[
            "check",
            "--profile",
            out_path.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let last = text(&out.stdout).lines().last().unwrap().to_string();
    // With the fitted overheads every synthetic point is within 0.5%.
    let max: f64 = last
        .split("max_abs_err=")
        .nth(1)
        .unwrap()
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(max <= 0.5, "{last}");
    // Refuses to overwrite without --force.
    let again = run(
        &[
            "fit",
            input.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("pass --force"));
}

#[test]
fn fit_without_usable_points_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("oom.jsonl");
    std::fs::write(
        &input,
        "{\"case\": \"a\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"status\": \"oom\"}}\n",
    )
    .unwrap();
    let out = run(
        &[
            "fit",
            input.to_str().unwrap(),
            "--out",
            dir.path().join("p.json").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no usable points"),
        "{}",
        text(&out.stderr)
    );
}

/// `calibrate --dry-run` shows the sweep that pins the three figures the
/// fit separates (inference, a backward pass, cuDNN), each at two sizes,
/// every point small enough for a 12 GB card, and writes nothing.
#[test]
fn calibrate_dry_run_shows_a_sweep_that_pins_every_coefficient() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("cal");
    let out = run(
        &[
            "calibrate",
            "--dry-run",
            "--out-dir",
            out_dir.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    for pins in [
        "## pins inference",
        "## pins a backward pass",
        "## pins cuDNN",
    ] {
        assert!(shown.contains(pins), "{shown}");
    }
    let predicted: Vec<f64> = shown
        .lines()
        .filter_map(|l| l.split("predicted ").nth(1))
        .map(|t| t.trim_end_matches(" GB").parse().unwrap())
        .collect();
    assert_eq!(predicted.len(), 6, "{shown}");
    let rtx_3060 = headroom_core::gpus::find("rtx-3060-12gb")
        .unwrap()
        .usable_bytes as f64
        / 1e9;
    assert!(predicted.iter().all(|&gb| gb < rtx_3060), "{predicted:?}");
    assert!(!out_dir.exists(), "a dry run writes nothing");
}

/// `calibrate` never replaces a file of an earlier calibration (checked
/// before any GPU is looked for), and without a driver it exits 2.
#[test]
fn calibrate_refuses_an_earlier_calibration_s_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("probe.json"), "{}").unwrap();
    let out = run(
        &["calibrate", "--out-dir", dir.path().to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("calibrate never replaces a file"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("probe.json")).unwrap(),
        "{}"
    );
    if calibration_collector::gpu::driver_present() {
        skip("this machine has an NVIDIA driver");
        return;
    }
    let fresh = dir.path().join("fresh");
    let out = run(&["calibrate", "--out-dir", fresh.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no NVIDIA driver found"));
}

#[test]
fn fit_names_two_cards_in_plain_words() {
    let points = synthetic_points(700_000_000, 90_000_000);
    let mut lines: Vec<String> = points.lines().map(String::from).collect();
    let mut other: Value = serde_json::from_str(&lines[1]).unwrap();
    other["runtime"]["gpu"] = json!("NVIDIA H100 80GB HBM3");
    lines[1] = other.to_string();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("two-cards.jsonl");
    std::fs::write(&input, lines.join("\n")).unwrap();
    let out_path = dir.path().join("profile.json");
    let out = run(
        &[
            "fit",
            input.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("but \"NVIDIA H100 80GB HBM3\" in case") && !err.contains("Some("),
        "{err}"
    );
}
