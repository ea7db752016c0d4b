//! GPU tests: `#[ignore]`d (CI has no GPU), one at a time (a job may take
//! the whole card). Run them on a GPU machine with
//! `cargo test -- --ignored`, or carry the test binary and set
//! `HEADROOM_COLLECTOR_BIN` to the collector. Where there is no driver or GPU
//! each says `skipped: no GPU` on the test run's output and checks nothing.

use crate::common;

use calibration_collector::gpu::Gpu;
use common::{run, skip, text};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One GPU test at a time, whatever `--test-threads` says: a job that takes
/// the whole card must not share it with another test's job.
fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static GPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    GPU.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The visible GPUs, asked of the collector (`probe --list`, a child): this
/// test process never initialises CUDA, which would cost it a few MiB of the
/// card while the jobs it starts run.
fn visible_gpus() -> usize {
    if !calibration_collector::gpu::driver_present() {
        return 0;
    }
    let out = run(&["probe", "--list", "--json"], None);
    if !out.status.success() {
        return 0;
    }
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["devices"].as_array().map_or(0, Vec::len)
}

fn have_gpu() -> bool {
    let ok = visible_gpus() > 0;
    if !ok {
        skip("no GPU (no NVIDIA driver, or no visible GPU)");
    }
    ok
}

/// GPU 0, read from outside (NVML) as `run` reads it.
fn gpu0() -> Gpu {
    let (mut gpus, _) = Gpu::watch(std::path::Path::new(&common::bin()), Some(0)).unwrap();
    gpus.remove(0)
}

fn python() -> String {
    std::env::var("HEADROOM_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn probe_lists_the_gpu_and_measures_overheads() {
    let _gpu = exclusive();
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
    let _gpu = exclusive();
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
    // What the job could use: every point has it, and no job's peak is above it.
    let total = lines[1]["runtime"]["gpu_total_bytes"].as_u64().unwrap();
    for line in &lines {
        let m = &line["measured"];
        let capacity = m["capacity_bytes"].as_u64().unwrap();
        assert!(capacity > 1 << 30 && capacity <= total, "{line}");
        assert!(m["driver_peak"].as_u64().unwrap() <= capacity, "{line}");
    }
}

/// A job that takes device memory until the driver refuses (1 GiB, then
/// 64 MiB, then 2 MiB allocations, through the driver API: no torch) and
/// reports what it got as `alloc_peak`, holding it `--hold-s` seconds first.
/// `--pid-file` gets its process id.
const FILL_JOB: &str = r#"
import argparse, ctypes, json, os, time
p = argparse.ArgumentParser()
p.add_argument("--hold-s", type=float, default=0.0)
p.add_argument("--pid-file")
p.add_argument("--tag")
a = p.parse_args()
cuda = ctypes.CDLL("libcuda.so.1")
def ok(r, what):
    if r != 0:
        raise SystemExit(f"{what} failed: CUresult {r}")
ok(cuda.cuInit(0), "cuInit")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
free, total = ctypes.c_size_t(), ctypes.c_size_t()
ok(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
got, ptrs = 0, []
for chunk in (1 << 30, 64 << 20, 2 << 20):
    while True:
        ptr = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(chunk)) != 0:
            break
        ptrs.append(ptr)
        got += chunk
if a.pid_file:
    with open(a.pid_file, "w") as f:
        f.write(str(os.getpid()))
time.sleep(a.hold_s)
print("HEADROOM_RESULT " + json.dumps({"alloc_peak": got, "cuda_free_after_context": free.value,
      "cuda_total": total.value, "allocations": len(ptrs)}), flush=True)
"#;

/// Waits until the GPU's used memory is back to `idle` (at most 10 s), then
/// half a second more: a job that filled the card may not have given all of
/// it back the moment it exits, and the next would get less (seen on the
/// H200: a second fill started at once got up to 20 MiB less).
fn settle(gpu: &Gpu, idle: u64) {
    let start = std::time::Instant::now();
    while gpu.used().unwrap_or(0) > idle && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
}

/// The `HEADROOM_RESULT` object a job printed.
fn result_of(stdout: &[u8]) -> Value {
    let out = text(stdout);
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("HEADROOM_RESULT "))
        .unwrap_or_else(|| panic!("no result line in {out}"));
    serde_json::from_str(line).unwrap()
}

fn measurement_lines(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
#[ignore = "needs an NVIDIA GPU and python3"]
fn a_job_gets_as_much_memory_under_the_collector_as_alone() {
    let _gpu = exclusive();
    if !have_gpu() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("fill.py");
    std::fs::write(&job, FILL_JOB).unwrap();
    let gpu = gpu0();
    let idle = gpu.used().unwrap();
    let alone = Command::new(python()).arg(&job).output().unwrap();
    assert!(alone.status.success(), "{}", text(&alone.stderr));
    let alone = result_of(&alone.stdout)["alloc_peak"].as_u64().unwrap();
    settle(&gpu, idle);

    // Under the collector, the GPU's compute processes are listed (NVML,
    // from this test process, which holds no context either) while the job
    // holds its memory: the job is there, the collector is not.
    let pid_file = dir.path().join("job.pid");
    let out_file = dir.path().join("fill.jsonl");
    let cmd = format!(
        "{} {} --hold-s 3 --pid-file {} --tag {{seq_len}}",
        python(),
        job.display(),
        pid_file.display()
    );
    let mut collector = Command::new(common::bin())
        .args(["run", "--cmd", &cmd, "--seq-lens", "1", "--json", "--out"])
        .arg(&out_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let collector_pid = collector.id();
    let mut seen = BTreeSet::new();
    while collector.try_wait().unwrap().is_none() {
        if let Ok(list) = gpu.compute_processes() {
            seen.extend(list.iter().map(|p| p.pid));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = collector.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let line = &measurement_lines(&out_file)[0];
    let m = &line["measured"];
    assert_eq!(m["status"], "ok", "{line}");
    let under = m["alloc_peak"].as_u64().unwrap();
    // One 2 MiB block either way: the same card, with nothing of the collector on it.
    assert!(
        under.abs_diff(alone) <= 2 << 20,
        "alone {alone} B, under the collector {under} B"
    );
    // What the collector says the job could use is what it took, its own
    // context included, to within the last refused block and the driver's
    // page tables.
    let capacity = m["capacity_bytes"].as_u64().unwrap();
    let driver = m["driver_peak"].as_u64().unwrap();
    assert!(
        driver <= capacity && capacity - driver < 256 << 20,
        "capacity {capacity} B, driver peak {driver} B"
    );
    let job_pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if seen.contains(&job_pid) {
        assert!(
            !seen.contains(&collector_pid),
            "the collector holds a CUDA context: {seen:?}"
        );
    } else {
        skip("NVML lists processes of another PID namespace (a container): the collector's absence is not checked");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and python3 with torch and transformers"]
fn run_with_the_builtin_harness_measures_a_preset() {
    let _gpu = exclusive();
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

/// The card of the catalog this GPU is: the one whose usable memory (the
/// CUDA total of an idle card) is this GPU's, to within 0.5%.
fn catalog_card(total: u64) -> Option<&'static headroom_core::gpus::Gpu> {
    headroom_core::gpus::CATALOG
        .iter()
        .filter(|g| g.usable_bytes.abs_diff(total) <= total / 200)
        .min_by_key(|g| g.usable_bytes.abs_diff(total))
}

/// `gpus --margin 0`'s longest length and largest batch on `card`.
fn gpus_boundary(spec: &std::path::Path, card: &str) -> (Option<u32>, Option<u32>) {
    let out = run(&["gpus", "--margin", "0", spec.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.strip_prefix(card).is_some_and(|r| r.starts_with(' ')))
        .unwrap_or_else(|| panic!("no row for {card} in\n{table}"));
    // After the name: usable ("150.11", "GB"), fits, jobs, max length, max batch.
    let words: Vec<&str> = row[card.len()..].split_whitespace().collect();
    (words[4].parse().ok(), words[5].parse().ok())
}

/// How a run of the harness ended, and its `measured` object.
fn harness_alone(harness: &std::path::Path, case_json: &str) -> (&'static str, Value) {
    let out = Command::new(python())
        .arg(harness)
        .arg("--case-json")
        .arg(case_json)
        .output()
        .unwrap();
    let status = match out.status.code() {
        Some(0) => "ok",
        Some(3) => "oom",
        _ => "failed",
    };
    let measured = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HEADROOM_RESULT "))
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .map(|r| r["measured"].clone())
        .unwrap_or(Value::Null);
    (status, measured)
}

#[test]
#[ignore = "needs an NVIDIA GPU of the catalog and python3 with torch and transformers"]
fn gpus_boundary_points_run_under_the_collector_exactly_as_alone() {
    let _gpu = exclusive();
    if !have_gpu() {
        return;
    }
    let gpu = gpu0();
    let Some(card) = catalog_card(gpu.info.total_bytes) else {
        skip("this GPU is not a card of the catalog");
        return;
    };
    let workload = r#"{"mode": "training", "dtype": "bf16", "training": {"precision": "bf16", "optimizer": "adamw"}}"#;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    let mut w: Value = serde_json::from_str(workload).unwrap();
    w["batch"] = 1.into();
    w["seq_len"] = 4096.into();
    std::fs::write(
        &spec,
        serde_json::json!({"model": "llama-3.2-1b", "workload": w}).to_string(),
    )
    .unwrap();
    let (max_len, max_batch) = gpus_boundary(&spec, card.name);
    let harness = dir.path().join("headroom_measure.py");
    std::fs::write(
        &harness,
        calibration_collector::commands::run::single::HARNESS,
    )
    .unwrap();
    let mut points = Vec::new();
    if let Some(l) = max_len {
        points.push((1, l));
    }
    if let Some(b) = max_batch {
        points.push((b, 4096));
    }
    assert!(!points.is_empty(), "nothing fits {}", card.name);
    for (batch, len) in points {
        let (b, l) = (batch.to_string(), len.to_string());
        let common_args = [
            "run",
            "--model",
            "llama-3.2-1b",
            "--workload",
            workload,
            "--seq-lens",
            &l,
            "--batches",
            &b,
        ];
        let dry = run(&[&common_args[..], &["--dry-run"]].concat(), None);
        assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
        let words = shlex::split(text(&dry.stdout).lines().nth(1).unwrap()).unwrap();
        let (alone, alone_m) = harness_alone(&harness, &words[3]);
        if alone == "failed" {
            skip("the harness failed on its own (torch or transformers missing?)");
            return;
        }
        let out_file = dir.path().join(format!("b{batch}_L{len}.jsonl"));
        let python = python();
        let out = run(
            &[
                &common_args[..],
                &["--python", &python, "--out", out_file.to_str().unwrap()],
            ]
            .concat(),
            None,
        );
        assert!(
            matches!(out.status.code(), Some(0)),
            "{}",
            text(&out.stderr)
        );
        let line = &measurement_lines(&out_file)[0];
        let m = &line["measured"];
        assert_eq!(
            m["status"], alone,
            "b{batch} L{len}: alone {alone_m}, under the collector {line}"
        );
        if alone == "ok" {
            for key in ["alloc_peak", "reserved_peak"] {
                assert_eq!(m[key], alone_m[key], "b{batch} L{len} {key}: {line}");
            }
        }
    }
}

/// Two GPUs of this node, and torchrun (`HEADROOM_TORCHRUN`, default
/// `torchrun`) with torch, transformers and pynvml.
fn have_two_gpus() -> Option<String> {
    if !have_gpu() {
        return None;
    }
    if visible_gpus() < 2 {
        skip("fewer than two GPUs visible");
        return None;
    }
    let torchrun = std::env::var("HEADROOM_TORCHRUN").unwrap_or_else(|_| "torchrun".into());
    if calibration_collector::commands::run::torchrun::check_available(&torchrun).is_err() {
        skip("no torchrun");
        return None;
    }
    Some(torchrun)
}

#[test]
#[ignore = "needs two NVIDIA GPUs and torchrun"]
fn probe_measures_nccl_on_two_ranks_and_run_writes_a_line_per_rank() {
    let _gpu = exclusive();
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
