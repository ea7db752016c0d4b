//! Jobs on several GPUs from the command line: `estimate` and `gpus` with
//! `--strategy`, `--world-size` and `--no-reshard-after-forward` (and their
//! errors), `gpus`' fewest cards per strategy, `run --nproc`'s torchrun
//! command and the parsing of several ranks' result lines (a fake torchrun),
//! and the no-GPU path of `probe --world-size` and `run --nproc`.

use crate::common;

use calibration_collector::cases::Status;
use calibration_collector::commands::probe::nccl_from_results;
use calibration_collector::commands::run::parallel::{self, ParallelPoint};
use calibration_collector::commands::run::{torchrun, RunArgs};
use common::{run, skip, text};
use headroom_core::gpus::CATALOG;
use headroom_core::parallel::Strategy;
use headroom_core::readers::Spec;
use headroom_core::search::{fewest_gpus, rank_peaks, strategies_for};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// A small decoder's training job: fast in debug builds.
fn small_training() -> String {
    json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 1, "seq_len": 256,
            "training": {"precision": "fp32"}}})
    .to_string()
}

fn estimate_json(args: &[&str], spec: &str) -> Value {
    let out = run(args, Some(spec));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_flags_override_the_specs_parallel_object() {
    let by_flags = estimate_json(
        &[
            "estimate",
            "--strategy",
            "fsdp2",
            "--world-size",
            "4",
            "--no-reshard-after-forward",
        ],
        &small_training(),
    );
    let mut spec: Value = serde_json::from_str(&small_training()).unwrap();
    spec["workload"]["parallel"] =
        json!({"strategy": "fsdp2", "world_size": 4, "reshard_after_forward": false});
    let by_spec = estimate_json(&["estimate"], &spec.to_string());
    assert_eq!(by_flags, by_spec);
    let p = &by_flags["inputs"]["workload"]["parallel"];
    assert_eq!(p["strategy"], "fsdp2");
    assert_eq!(p["world_size"], 4);
    assert_eq!(p["reshard_after_forward"], false);
    // A flag beats the spec: the spec's DDP on 8 becomes ZeRO-1 on 2.
    spec["workload"]["parallel"] = json!({"strategy": "ddp", "world_size": 8});
    let v = estimate_json(
        &["estimate", "--strategy", "zero1", "--world-size", "2"],
        &spec.to_string(),
    );
    assert_eq!(v["inputs"]["workload"]["parallel"]["strategy"], "zero1");
    assert_eq!(v["inputs"]["workload"]["parallel"]["world_size"], 2);
    // `--strategy none` alone is one GPU, whatever the spec said.
    let v = estimate_json(&["estimate", "--strategy", "none"], &spec.to_string());
    assert_eq!(v["inputs"]["workload"]["parallel"]["world_size"], 1);
    let single = estimate_json(&["estimate"], &small_training());
    assert_eq!(v["driver_peak"], single["driver_peak"]);
}

#[test]
fn bad_values_exit_1_naming_the_flag_the_field_and_the_keys() {
    let cases: [(&[&str], &[&str]); 6] = [
        (
            &["--strategy", "fsdp3"],
            &[
                "--strategy: unknown strategy `fsdp3`",
                "workload.parallel.strategy",
                "\"none\", \"ddp\", \"fsdp2\", \"zero1\" or \"tp\"",
            ],
        ),
        (
            &["--strategy", "ddp", "--world-size", "two"],
            &[
                "--world-size: `two` is not a whole number",
                "workload.parallel.world_size",
                "1 to 4096",
            ],
        ),
        (
            &["--strategy", "ddp", "--world-size", "0"],
            &[
                "--world-size: 0 is out of range",
                "workload.parallel.world_size",
            ],
        ),
        (
            &["--world-size", "8"],
            &[
                "--strategy/--world-size",
                "`workload.parallel.strategy`",
                "world_size` is 8",
            ],
        ),
        (
            &["--strategy", "tp", "--world-size", "2"],
            &[
                "`workload.parallel.strategy`",
                "inference only",
                "ddp, fsdp2 or zero1",
            ],
        ),
        (
            &["--strategy", "ddp", "--no-reshard-after-forward"],
            &[
                "--no-reshard-after-forward",
                "workload.parallel.reshard_after_forward",
                "fsdp2",
            ],
        ),
    ];
    for (flags, wanted) in cases {
        for cmd in ["estimate", "gpus"] {
            let mut args = vec![cmd];
            args.extend_from_slice(flags);
            let out = run(&args, Some(&small_training()));
            assert_eq!(out.status.code(), Some(1), "{args:?}");
            let err = text(&out.stderr);
            assert_eq!(err.lines().count(), 1, "{err}");
            for w in wanted {
                assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
            }
            assert!(out.stdout.is_empty());
        }
    }
}

#[test]
fn the_table_says_per_rank_and_nccl_only_for_several_gpus() {
    let out = run(
        &[
            "estimate",
            "--table",
            "--strategy",
            "ddp",
            "--world-size",
            "2",
        ],
        Some(&small_training()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("batch 1 per rank of 2 GPUs (ddp), seq_len 256"),
        "{table}"
    );
    let nccl = table
        .lines()
        .find(|l| l.starts_with("NCCL "))
        .expect("an NCCL line");
    assert!(nccl.contains("\"library kernels & handles\""), "{nccl}");
    // The core's own figures: communicator plus one peer at two ranks.
    let rt = headroom_core::RuntimeProfile::default();
    let bytes = rt.nccl_communicator_bytes + rt.nccl_peer_bytes;
    assert!(
        nccl.contains(&headroom_core::bytes::group_digits(bytes)),
        "{nccl}"
    );
    let out = run(
        &[
            "estimate",
            "--table",
            "--strategy",
            "fsdp2",
            "--world-size",
            "8",
            "--no-reshard-after-forward",
        ],
        Some(&small_training()),
    );
    assert!(
        text(&out.stdout).contains("per rank of 8 GPUs (fsdp2, no reshard after forward)"),
        "{}",
        text(&out.stdout)
    );
    let single = text(&run(&["estimate", "--table"], Some(&small_training())).stdout);
    assert!(
        !single.contains("per rank") && !single.contains("NCCL"),
        "{single}"
    );
}

#[test]
fn gpus_gives_the_fewest_cards_per_strategy() {
    let out = run(&["gpus"], Some(&small_training()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("gpu ")).unwrap();
    for col in ["gpus ddp", "gpus zero1", "gpus fsdp2"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(table.contains("gpus STRATEGY: the fewest cards"), "{table}");
    // Every row's answer is the core's.
    let spec = Spec::from_json(&small_training()).unwrap();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let strategies = strategies_for(arch, w);
    assert_eq!(
        strategies,
        [Strategy::Ddp, Strategy::Zero1, Strategy::Fsdp2]
    );
    // Within each card's capacity for the strategy's likely range.
    let capacity = |gpu, s| headroom_core::search::strategy_capacity(gpu, arch, w, rt, s, 0);
    let peaks: Vec<_> = strategies
        .iter()
        .map(|&s| {
            let smallest = CATALOG.iter().map(|g| capacity(g, s)).min().unwrap();
            rank_peaks(arch, w, rt, s, smallest).unwrap()
        })
        .collect();
    let mut some_need_several = false;
    for gpu in CATALOG {
        let row = lines
            .iter()
            .find(|l| l.starts_with(gpu.name))
            .unwrap_or_else(|| panic!("no row for {}", gpu.name));
        let cells: Vec<&str> = row.split_whitespace().collect();
        let tail = &cells[cells.len() - 3..];
        for ((cell, p), s) in tail.iter().zip(&peaks).zip(&strategies) {
            let want = fewest_gpus(p, capacity(gpu, *s)).map_or("-".to_string(), |n| n.to_string());
            assert_eq!(*cell, want, "{row}");
            some_need_several |= want != "1" && want != "-";
        }
    }
    assert!(some_need_several, "{table}");
    // ESMFold has no strategy: no such column.
    let out = run(
        &["gpus"],
        Some(
            &json!({"model": "esmfold-v1", "workload": {"mode": "inference", "seq_len": 64}})
                .to_string(),
        ),
    );
    assert!(
        !text(&out.stdout).contains("gpus "),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn gpus_longest_length_is_per_rank_at_the_given_strategy() {
    let out = run(
        &["gpus", "--strategy", "fsdp2", "--world-size", "8"],
        Some(&small_training()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.starts_with("Llama 3.2 1B at batch 1 per rank of 8 GPUs (fsdp2), seq_len 256"),
        "{table}"
    );
}

fn fake_point() -> ParallelPoint {
    let args = RunArgs {
        model: Some("llama-3.2-1b".into()),
        workload: Some(
            r#"{"mode": "training", "training": {"precision": "fp32"}, "parallel": {"strategy": "fsdp2"}}"#
                .into(),
        ),
        seq_lens: vec![512],
        nproc: Some("2".into()),
        ..RunArgs::default()
    };
    parallel::plan(&args).unwrap().remove(0)
}

/// A stand-in for torchrun: prints two ranks' result lines (one on stderr
/// with torchrun's rank prefix) among other output.
fn fake_torchrun(dir: &Path, body: &str) -> String {
    let path = dir.join("torchrun");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path.display().to_string()
}

fn result_line(rank: u32, peak: u64) -> String {
    json!({"case": "c", "model": "llama-3.2-1b", "workload": {"mode": "training"},
           "runtime": {"gpu": "NVIDIA H200", "gpu_total_bytes": 150109880320u64, "nccl": "2.28.9"},
           "measured": {"rank": rank, "world_size": 2, "alloc_peak": peak - (6 << 30),
                        "reserved_peak": peak - (2 << 30), "driver_peak": peak, "nccl_bytes": 600 << 20 | rank as u64, "oom": false}})
    .to_string()
}

#[test]
fn two_ranks_result_lines_become_two_measurement_lines() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "echo 'W1201 starting 2 workers'\necho 'HEADROOM_RESULT {}'\necho '[rank1]:HEADROOM_RESULT {}' >&2\necho 'done'",
        result_line(0, 30 << 30),
        result_line(1, 31 << 30)
    );
    let fake = fake_torchrun(dir.path(), &body);
    let p = fake_point();
    let (cmd, shown) = torchrun::command(&fake, 2, Path::new("h.py"), &["--nccl-only".into()]);
    assert!(
        shown.contains("--standalone --nproc-per-node 2 h.py --nccl-only"),
        "{shown}"
    );
    let never = AtomicBool::new(false);
    let job = torchrun::run_job(cmd, Duration::from_secs(30), &never, false).unwrap();
    assert_eq!(job.exit_code, Some(0));
    assert_eq!(job.results.len(), 2);
    let lines = parallel::rank_lines(&p, &job);
    assert_eq!(lines.len(), 2);
    for (rank, (r, status, line)) in lines.iter().enumerate() {
        assert_eq!(*r as usize, rank);
        assert_eq!(*status, Status::Ok);
        assert_eq!(line["case"], format!("{}_rank{rank}", p.case));
        assert_eq!(line["measured"]["rank"], rank);
        assert_eq!(line["measured"]["world_size"], 2);
        for key in ["driver_peak", "reserved_peak", "alloc_peak"] {
            assert!(line["measured"][key].as_u64().unwrap() > 0, "{key}");
        }
        assert_eq!(line["predicted"]["driver_peak"], p.predicted["driver_peak"]);
        assert!(line["predicted"]["error"].is_number());
        assert_eq!(line["collector"]["launcher"], "torchrun");
    }
    // The lines are measurement cases `check` reads.
    let file = dir.path().join("m.jsonl");
    let text_lines: Vec<String> = lines.iter().map(|(_, _, l)| l.to_string()).collect();
    std::fs::write(&file, text_lines.join("\n") + "\n").unwrap();
    let out = run(&["check", file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("cases=2 "),
        "{}",
        text(&out.stdout)
    );
    // The NCCL probe reads the same lines.
    let one = torchrun::rank_results(&format!("HEADROOM_RESULT {}", result_line(0, 30 << 30)));
    let n = nccl_from_results(&one, &job.results, 2).unwrap();
    assert_eq!(n.communicator_bytes, 600 << 20);
    assert_eq!(n.peer_bytes, Some(1));
}

#[test]
fn a_rank_out_of_memory_keeps_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "echo 'HEADROOM_RESULT {}'\necho '[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB' >&2\nexit 1",
        result_line(0, 30 << 30)
    );
    let fake = fake_torchrun(dir.path(), &body);
    let (cmd, _) = torchrun::command(&fake, 2, Path::new("h.py"), &[]);
    let never = AtomicBool::new(false);
    let job = torchrun::run_job(cmd, Duration::from_secs(30), &never, false).unwrap();
    let lines = parallel::rank_lines(&fake_point(), &job);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0].1, Status::Ok);
    assert_eq!(lines[1].1, Status::Oom);
    assert_eq!(lines[1].2["measured"]["exit_code"], 1);
}

#[test]
fn run_nproc_dry_run_prints_the_torchrun_command() {
    let out = run(
        &[
            "run",
            "--model",
            "llama-3.2-1b",
            "--workload",
            r#"{"mode": "training", "training": {"precision": "fp32"}, "parallel": {"strategy": "ddp"}}"#,
            "--seq-lens",
            "512,1024",
            "--nproc",
            "2",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert_eq!(shown.lines().count(), 4, "{shown}");
    let first = shown.lines().nth(1).unwrap();
    assert!(
        first.starts_with("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --standalone --nproc-per-node 2 '<harness>/headroom_parallel.py' --case-json '{"),
        "{first}"
    );
    assert!(first.contains(r#""world_size":2"#), "{first}");
    assert!(shown.contains("on 2 GPU(s): predicted "), "{shown}");
    // A case file, each case on its own world size unless --nproc says.
    let dir = tempfile::tempdir().unwrap();
    let cases = dir.path().join("cases.jsonl");
    std::fs::write(
        &cases,
        json!({"case": "a", "model": "llama-3.2-1b", "workload": {"mode": "training", "seq_len": 128,
                "parallel": {"strategy": "zero1", "world_size": 4}}, "snapshot": true})
        .to_string()
            + "\n",
    )
    .unwrap();
    let c = cases.to_str().unwrap();
    let out = run(&["run", "--cases", c, "--dry-run"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("--nproc-per-node 4 "));
    let out = run(&["run", "--cases", c, "--nproc", "2", "--dry-run"], None);
    assert!(text(&out.stdout).starts_with("# a_x2 on 2 GPU(s)"));
    // What the harness cannot run is bad input, naming the line and field.
    std::fs::write(
        &cases,
        json!({"case": "b", "model": "llama-3.2-1b", "workload": {"mode": "inference", "seq_len": 128,
                "parallel": {"strategy": "tp", "world_size": 2}}})
        .to_string(),
    )
    .unwrap();
    let out = run(&["run", "--cases", c, "--dry-run"], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(":1 (case b)") && err.contains("workload.parallel.strategy"),
        "{err}"
    );
    let out = run(&["run", "--cases", c, "--nproc", "x", "--dry-run"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--nproc: `x` is not a whole number"));
}

#[test]
fn without_a_driver_several_gpu_commands_exit_2() {
    if calibration_collector::gpu::driver_present() {
        skip("this machine has an NVIDIA driver");
        return;
    }
    for args in [
        vec!["probe", "--world-size", "2"],
        vec![
            "run",
            "--model",
            "llama-3.2-1b",
            "--workload",
            r#"{"mode": "training", "parallel": {"strategy": "fsdp2"}}"#,
            "--seq-lens",
            "256",
            "--nproc",
            "2",
        ],
    ] {
        let out = run(&args, None);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: no NVIDIA driver found"), "{err}");
        assert!(out.stdout.is_empty());
    }
    // A bad count is bad input before any GPU is looked for.
    let out = run(&["probe", "--world-size", "0"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--world-size: 0 is out of range"));
}

#[test]
fn a_missing_torchrun_is_a_missing_gpu_stack() {
    let e = torchrun::check_available("/nonexistent/torchrun").unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("torchrun not found"), "{e}");
}

#[test]
fn fit_records_the_probes_nccl_figures_in_the_profile() {
    let dir = tempfile::tempdir().unwrap();
    let points = dir.path().join("points.jsonl");
    std::fs::copy(common::data("h200-sample.jsonl"), &points).unwrap();
    let probe = dir.path().join("probe.json");
    let communicator = 600u64 << 20;
    let peer = 280u64 << 20;
    std::fs::write(
        &probe,
        json!({
            "collector_version": "0.1.0",
            "driver": {"driver": "580.159.04", "cuda_driver_api": "13.0"},
            "devices": [{"ordinal": 0, "name": "NVIDIA H200", "total_bytes": 150754820096u64,
                         "free_bytes": 150000000000u64, "compute_capability": "9.0",
                         "overheads": {"context_bytes": 520093696, "cublas_handle_bytes": 0,
                                       "cublas_first_matmul_bytes": 0, "cublas_library_bytes": 0,
                                       "cublas_workspace_bytes": 33554432, "note": null}}],
            "nccl": {"world_size": 4, "communicator_bytes": communicator, "peer_bytes": peer,
                     "rank_bytes": vec![communicator + 2 * peer; 4], "nccl_version": "2.28.9", "nvls": false}
        })
        .to_string(),
    )
    .unwrap();
    let out_path = dir.path().join("profile.json");
    let out = run(
        &[
            "fit",
            points.to_str().unwrap(),
            "--probe",
            probe.to_str().unwrap(),
            "--out",
            out_path.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let text_profile = std::fs::read_to_string(&out_path).unwrap();
    let profile: Value = serde_json::from_str(&text_profile).unwrap();
    assert_eq!(profile["runtime"]["nccl_communicator_bytes"], communicator);
    assert_eq!(profile["runtime"]["nccl_peer_bytes"], peer);
    let c = &profile["coefficients"]["nccl_peer_bytes"];
    assert_eq!(c["value"], peer);
    assert!(c["source"].as_str().unwrap().contains("4 rank(s)"), "{c}");
    // The profile validates.
    calibration_collector::profile::parse(
        &text_profile,
        &calibration_collector::profile::Identity::default(),
    )
    .unwrap();
}

/// A strategy that does not apply to the model (tensor parallelism is
/// modelled for Llama-style decoders) is a column without an answer and a
/// note, never an error: Mixtral, Qwen-MoE, GPT-2 and Phi-3 inference, with
/// and without `--advise`.
#[test]
fn a_strategy_the_model_does_not_take_is_a_dash_not_an_error() {
    for model in ["mixtral-8x7b", "qwen1.5-moe-a2.7b", "gpt2", "phi-3-mini-4k"] {
        let spec =
            json!({"model": model, "workload": {"mode": "inference", "batch": 1, "seq_len": 4096,
            "dtype": "bf16", "inference": {"kind": "generate", "new_tokens": 16}}})
            .to_string();
        for extra in [&[][..], &["--advise", "rtx-4090"][..]] {
            let args: Vec<&str> = ["gpus"].iter().chain(extra).copied().collect();
            let out = run(&args, Some(&spec));
            assert_eq!(out.status.code(), Some(0), "{model}: {}", text(&out.stderr));
            let table = text(&out.stdout);
            assert!(
                table.contains(
                    "gpus tp: not for this model (`tp` is modelled for Llama-style decoders"
                ),
                "{model}: {table}"
            );
            // One card or none: `1` where the row fits, `-` elsewhere.
            for gpu in CATALOG {
                let row = table.lines().find(|l| l.starts_with(gpu.name)).unwrap();
                let cells: Vec<&str> = row.split_whitespace().collect();
                let fits = row[gpu.name.len()..].split_whitespace().nth(2) == Some("yes");
                let want = if fits { "1" } else { "-" };
                assert_eq!(cells.last(), Some(&want), "{model}: {row}");
            }
        }
    }
}

/// Llama 3.1 70B full fine-tuning written with autocast: the FSDP2 column
/// is there (it was dropped without a word), answered as the Trainer and
/// accelerate run FSDP2 with bf16, the same count as fp32 weights give.
#[test]
fn gpus_answers_fsdp2_for_a_job_written_with_autocast() {
    let spec = |precision: &str| {
        format!(
            r#"{{"model":"llama-3.1-70b","workload":{{"mode":"training","batch":1,"seq_len":4096,
            "training":{{"optimizer":"adamw","precision":"{precision}","grad_checkpointing":true}}}}}}"#
        )
    };
    let column = |precision: &str| {
        let out = run(&["gpus", "-"], Some(&spec(precision)));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains("gpus fsdp2"), "{stdout}");
        let row = stdout
            .lines()
            .find(|l| l.starts_with("NVIDIA H100"))
            .unwrap()
            .to_string();
        (row.split_whitespace().last().unwrap().to_string(), stdout)
    };
    let (amp, stdout) = column("amp_bf16");
    assert!(
        stdout.contains("fp32 sharded weights gathered in bf16"),
        "{stdout}"
    );
    assert_eq!(amp, "32");
}

/// A job that fits a card alone needs one of it in every strategy's
/// column (DDP's wider range had made it "-" on the RTX 5090).
#[test]
fn a_card_the_job_fits_alone_needs_one_of_it_in_every_column() {
    let spec =
        r#"{"model":"llama-3.2-1b","workload":{"mode":"training","batch":2,"seq_len":1024}}"#;
    let out = run(&["gpus", "-"], Some(spec));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut checked = 0;
    for row in stdout.lines().filter(|l| l.contains(" yes ")) {
        let columns: Vec<&str> = row.split_whitespace().rev().take(3).collect();
        assert_eq!(columns, ["1", "1", "1"], "{row}");
        checked += 1;
    }
    assert!(checked >= 8, "{stdout}");
}
