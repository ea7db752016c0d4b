//! GPU tests: `#[ignore]`d (CI has no GPU). Run them on a GPU machine with
//! `cargo test -- --ignored`, or carry the test binary and set
//! `HEADROOM_COLLECTOR_BIN` to the collector. Where there is no driver or GPU
//! each says `skipped: no GPU` on the test run's output and checks nothing.

mod common;

use common::{run, skip, text};
use serde_json::Value;

fn have_gpu() -> bool {
    let ok =
        calibration_collector::gpu::driver_present() && calibration_collector::gpu::init().is_ok();
    if !ok {
        skip("no GPU (no NVIDIA driver, or no visible GPU)");
    }
    ok
}

fn python() -> String {
    std::env::var("HEADROOM_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn probe_lists_the_gpu_and_measures_overheads() {
    if !have_gpu() {
        return;
    }
    let out = run(&["probe", "--json", "--device", "0"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = &v["devices"][0];
    assert!(d["total_bytes"].as_u64().unwrap() > 1 << 30);
    assert!(d["free_bytes"].as_u64().unwrap() <= d["total_bytes"].as_u64().unwrap());
    let ctx = d["overheads"]["context_bytes"].as_u64().unwrap();
    assert!((50 << 20..4 << 30).contains(&ctx), "context {ctx}");
    // Without cuBLAS on the library path its figures are missing, and the
    // report says why.
    match d["overheads"]["cublas_library_bytes"].as_u64() {
        Some(lib) => assert!((1 << 20..2 << 30).contains(&lib), "cuBLAS {lib}"),
        None => {
            let note = d["overheads"]["note"].as_str().unwrap_or("");
            assert!(note.contains("cuBLAS") || note.contains("cublas"), "{d}");
            skip("the cuBLAS figures: cuBLAS is not on the library path");
        }
    }
}

const JOB: &str = r#"
import argparse, json, sys, torch
p = argparse.ArgumentParser(); p.add_argument("--mib", type=int); a = p.parse_args()
x = torch.empty(a.mib << 20, dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
      "reserved_peak": torch.cuda.max_memory_reserved()}), flush=True)
"#;

#[test]
#[ignore = "needs an NVIDIA GPU and python3 with torch"]
fn run_measures_a_job_from_outside_and_records_oom_points() {
    if !have_gpu() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job.py");
    std::fs::write(&job, JOB).unwrap();
    let out_file = dir.path().join("points.jsonl");
    let cmd = format!("{} {} --mib {{seq_len}}", python(), job.display());
    // 1 TiB cannot fit on any card: an OOM point, and the sweep goes on.
    let out = run(
        &[
            "run",
            "--cmd",
            &cmd,
            "--seq-lens",
            "1024,1048576,2048",
            "--out",
            out_file.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for (line, mib) in [(&lines[0], 1024u64), (&lines[2], 2048)] {
        let m = &line["measured"];
        assert_eq!(m["status"], "ok", "{line}");
        let reserved = m["reserved_peak"].as_u64().unwrap();
        let driver = m["driver_peak"].as_u64().unwrap();
        assert!(reserved >= mib << 20);
        // The driver peak holds the tensor plus a CUDA context.
        assert!(driver > reserved && driver - reserved < 3 << 30, "{line}");
        assert!(m["poll_hz"].as_f64().unwrap() >= 1000.0, "{line}");
    }
    assert_eq!(lines[1]["measured"]["status"], "oom", "{}", lines[1]);
    assert!(lines[1]["measured"]["capacity_bytes"].as_u64().unwrap() > 1 << 30);
}

#[test]
#[ignore = "needs an NVIDIA GPU and python3 with torch and transformers"]
fn run_with_the_builtin_harness_measures_a_preset() {
    if !have_gpu() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("gpt2.jsonl");
    let out = run(
        &[
            "run",
            "--model",
            "gpt2",
            "--workload",
            r#"{"dtype":"fp32","inference":{"kind":"forward","logits":"all"}}"#,
            "--seq-lens",
            "256",
            "--python",
            &python(),
            "--out",
            out_file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(&out_file)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line["measured"]["status"], "ok", "{line}");
    // The peak of the case, not of the model construction before it.
    assert_eq!(line["measured"]["peak_window"], "case", "{line}");
    assert!(line["measured"]["process_peak"].as_u64() >= line["measured"]["driver_peak"].as_u64());
    assert!(
        line["measured"]["driver_peak"].as_u64().unwrap()
            > line["measured"]["reserved_peak"].as_u64().unwrap()
    );
    assert!(line["runtime"]["torch"].is_string(), "{line}");
    // `check` reads what `run` wrote.
    let out = run(&["check", out_file.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// Two GPUs of this node, and torchrun (`HEADROOM_TORCHRUN`, default
/// `torchrun`) with torch, transformers and pynvml.
fn have_two_gpus() -> Option<String> {
    if !have_gpu() {
        return None;
    }
    if calibration_collector::gpu::init().unwrap_or(0) < 2 {
        skip("fewer than two GPUs visible");
        return None;
    }
    let torchrun = std::env::var("HEADROOM_TORCHRUN").unwrap_or_else(|_| "torchrun".into());
    if calibration_collector::torchrun::check_available(&torchrun).is_err() {
        skip("no torchrun");
        return None;
    }
    Some(torchrun)
}

#[test]
#[ignore = "needs two NVIDIA GPUs and torchrun"]
fn probe_measures_nccl_on_two_ranks_and_run_writes_a_line_per_rank() {
    let Some(torchrun) = have_two_gpus() else {
        return;
    };
    let out = run(
        &[
            "probe",
            "--json",
            "--device",
            "0",
            "--world-size",
            "2",
            "--torchrun",
            &torchrun,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let comm = v["nccl"]["communicator_bytes"].as_u64().unwrap();
    assert!((16 << 20..4 << 30).contains(&comm), "communicator {comm}");
    assert_eq!(v["nccl"]["rank_bytes"].as_array().unwrap().len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("x2.jsonl");
    let out = run(
        &[
            "run",
            "--model",
            "llama-3.2-1b",
            "--workload",
            r#"{"mode": "training", "training": {"precision": "fp32"}, "parallel": {"strategy": "fsdp2"}}"#,
            "--seq-lens",
            "512",
            "--nproc",
            "2",
            "--torchrun",
            &torchrun,
            "--out",
            out_file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for (rank, l) in lines.iter().enumerate() {
        assert_eq!(l["measured"]["rank"], rank);
        assert_eq!(l["measured"]["status"], "ok");
        let e = l["predicted"]["error"].as_f64().unwrap();
        assert!(e.abs() < 0.15, "rank {rank}: error {e}");
    }
}
