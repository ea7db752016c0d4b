//! Helpers shared by the integration tests.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The binary under test (`HEADROOM_COLLECTOR_BIN` overrides it, for test
/// binaries carried to a GPU machine).
pub fn bin() -> String {
    std::env::var("HEADROOM_COLLECTOR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_headroom").to_string())
}

pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

pub fn run(args: &[&str], stdin: Option<&str>) -> Output {
    run_env(args, stdin, &[])
}

pub fn run_env(args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("binary runs");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

/// Says that a test did not run its checks, and why, on the test run's own
/// output: written straight to stderr, which the test harness does not
/// capture, so a skip is seen even when the test reports `ok`.
pub fn skip(reason: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "{}: skipped: {reason}",
        std::thread::current().name().unwrap_or("test")
    );
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A valid profile document (one point).
pub fn valid_profile() -> Value {
    let rt = headroom_core::RuntimeProfile::h200();
    let coef = |v: u64| json!({"value": v, "uncertainty": 2097152, "source": "probe of GPU 0 (NVIDIA H200)", "cases": []});
    json!({
        "schema_version": 1,
        "name": "NVIDIA H200, torch 2.11.0+cu130, driver 580.159.04",
        "created": "2026-11-30T05:00:00Z",
        "collector_version": "0.1.0",
        "gpu": {"name": "NVIDIA H200", "total_bytes": 150754820096u64, "compute_capability": "9.0"},
        "driver": "580.159.04",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "transformers": "5.17.0",
        "runtime": serde_json::to_value(&rt).unwrap(),
        "coefficients": {
            "cuda_context_bytes": coef(rt.cuda_context_bytes),
            "cublas_library_bytes": coef(rt.cublas_library_bytes),
            "model_kernels_bytes": {"value": rt.model_kernels_bytes, "uncertainty": 1048576, "source": "least squares over 1 point(s)", "cases": ["llama8b_gen_b1_L2048"]},
        },
        "fit": {"basis": "torch_reserved", "points_used": 1, "points_skipped": 0, "residual_std_bytes": 0},
        "summary": {
            "before": {"cases": 1, "median_abs_err": 0.003, "p90_abs_err": 0.003, "max_abs_err": 0.003, "under_5pct": 0},
            "after": {"cases": 1, "median_abs_err": 0.001, "p90_abs_err": 0.001, "max_abs_err": 0.001, "under_5pct": 0}
        },
        "points": [{
            "case": "llama8b_gen_b1_L2048",
            "model": "llama-3.1-8b",
            "params": 8030261248u64,
            "weight_bytes": 16060522496u64,
            "workload": {"mode": "inference", "batch": 1, "seq_len": 2048, "dtype": "bf16", "inference": {"kind": "generate", "logits": "last", "kv_cache": true, "new_tokens": 16}, "attention": "sdpa"},
            "runtime": {"gpu": "NVIDIA H200", "gpu_total_bytes": 150754820096u64, "driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0", "transformers": "5.17.0", "allocator": "default"},
            "measured": {"alloc_peak": 16659337216u64, "reserved_peak": 16712204288u64, "driver_peak": 17442865152u64, "resident_before": 16060522496u64, "seconds": 0.81, "status": "ok"},
            "prediction": {"before": 17390436352u64, "after": 17420000000u64, "error_before": -0.003, "error_after": -0.0013}
        }]
    })
}
