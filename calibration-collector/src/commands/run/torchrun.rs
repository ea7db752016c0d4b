//! Jobs on several GPUs through `torchrun` and the several-GPU harness
//! (`python/headroom_parallel.py`, embedded in the binary): the command
//! line, the environment it runs in, and the `HEADROOM_RESULT` lines of its
//! ranks (read by [`super::child_output`]). Used by `probe --world-size` and
//! `run --nproc`.

use super::child_output::Reader;
use super::RESULT_PREFIX;
use crate::error::{CollectorError, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The several-GPU harness, embedded at build time.
pub const PARALLEL_HARNESS: &str = include_str!("../../../python/headroom_parallel.py");

/// The environment every rank runs with: NVLink multicast (NVLS, symmetric
/// memory) off, as the public measurements were taken and as machines
/// without multicast need.
pub const ENV: [(&str, &str); 2] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
];

/// Writes the embedded several-GPU harness to a temporary file, removed on drop.
pub struct HarnessFile(pub PathBuf);

impl HarnessFile {
    /// Writes it.
    pub fn write() -> Result<HarnessFile> {
        let path =
            std::env::temp_dir().join(format!("headroom_parallel-{}.py", std::process::id()));
        std::fs::write(&path, PARALLEL_HARNESS).map_err(|e| CollectorError::io(&path, e))?;
        Ok(HarnessFile(path))
    }
}

impl Drop for HarnessFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `torchrun --standalone --nproc-per-node N HARNESS ARGS...` with [`ENV`],
/// and the same as one shell line to show (`--dry-run`).
pub fn command(torchrun: &str, nproc: u32, harness: &Path, args: &[String]) -> (Command, String) {
    let nproc = nproc.to_string();
    let harness = harness.display().to_string();
    let mut argv: Vec<&str> = vec!["--standalone", "--nproc-per-node", &nproc, &harness];
    argv.extend(args.iter().map(String::as_str));
    let mut cmd = Command::new(torchrun);
    cmd.args(&argv);
    for (k, v) in ENV {
        cmd.env(k, v);
    }
    cmd.env("PYTHONUNBUFFERED", "1");
    let env: Vec<String> = ENV.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let shown = format!(
        "{} {}",
        env.join(" "),
        shlex::try_join(std::iter::once(torchrun).chain(argv.iter().copied())).unwrap_or_default()
    );
    (cmd, shown)
}

/// Checks that `torchrun` can be started; its absence is a missing GPU
/// software stack (exit code 2), as a missing driver is.
pub fn check_available(torchrun: &str) -> Result<()> {
    match Command::new(torchrun)
        .arg("--help")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(CollectorError::NoGpu(format!(
            "`{torchrun} --help` failed ({s}): several-GPU jobs need torchrun from a torch installation with CUDA (pass --torchrun to choose it)"
        ))),
        Err(e) => Err(CollectorError::NoGpu(format!(
            "torchrun not found (`{torchrun}`: {e}): several-GPU jobs need torchrun from a torch installation with CUDA (pass --torchrun to choose it)"
        ))),
    }
}

/// The `HEADROOM_RESULT` objects of a job's output, one per rank (the last
/// line of each rank wins), in rank order. A line may carry a prefix
/// (torchrun's `[rank0]:`); lines that are not JSON are ignored. An object
/// without `measured.rank` counts as rank 0.
pub fn rank_results(output: &str) -> Vec<Value> {
    let mut by_rank = BTreeMap::new();
    for line in output.lines() {
        if let Some(v) = result_of_line(line) {
            by_rank.insert(rank_of(&v), v);
        }
    }
    by_rank.into_values().collect()
}

/// The JSON object of one `HEADROOM_RESULT` line, if it is one.
pub fn result_of_line(line: &str) -> Option<Value> {
    let at = line.find(RESULT_PREFIX)?;
    let v: Value = serde_json::from_str(line[at + RESULT_PREFIX.len()..].trim()).ok()?;
    v.is_object().then_some(v)
}

/// A rank's result line for [`Reader`]: its object in the
/// slot of its rank.
fn ranked_result(line: &str) -> Option<(u64, Value)> {
    result_of_line(line).map(|v| (rank_of(&v), v))
}

/// `measured.rank` of a result (0 when absent).
pub fn rank_of(v: &Value) -> u64 {
    v.get("measured")
        .and_then(|m| m.get("rank"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// How a torchrun job ended.
#[derive(Clone, Debug, Default)]
pub struct JobOutput {
    /// torchrun's exit code (`None`: killed by a signal).
    pub exit_code: Option<i32>,
    /// Each rank's result object, in rank order.
    pub results: Vec<Value>,
    /// The last lines of the job's other output.
    pub tail: Vec<String>,
    /// Stopped by Ctrl-C.
    pub interrupted: bool,
    /// Killed after the time limit.
    pub timed_out: bool,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl JobOutput {
    /// True when the output says a rank ran out of memory.
    pub fn mentions_oom(&self) -> bool {
        self.tail.iter().any(|l| {
            let l = l.to_ascii_lowercase();
            l.contains("out of memory") || l.contains("outofmemoryerror")
        })
    }
}

/// Asks torchrun to stop (SIGTERM: it stops its workers), then kills it
/// after `grace`.
fn stop(child: &mut std::process::Child, grace: Duration) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs a torchrun job to its end, the time limit, or `interrupted`.
pub fn run_job(
    mut command: Command,
    timeout: Duration,
    interrupted: &AtomicBool,
    echo: bool,
) -> Result<JobOutput> {
    let start = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            CollectorError::NoGpu(format!(
                "could not start torchrun ({e}); pass --torchrun to choose it"
            ))
        })?;
    let reader = Reader::start(&mut child, echo, ranked_result, 80);
    let mut out = JobOutput::default();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        if interrupted.load(Ordering::SeqCst) {
            out.interrupted = true;
            stop(&mut child, Duration::from_secs(20));
            break None;
        }
        if start.elapsed() > timeout {
            out.timed_out = true;
            stop(&mut child, Duration::from_secs(20));
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let lines = reader.finish();
    out.exit_code = status.and_then(|s| s.code());
    out.results = lines.results.into_values().map(|(v, _)| v).collect();
    out.tail = lines.tail;
    out.seconds = start.elapsed().as_secs_f64();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_torchrun_standalone_with_multicast_off() {
        let (cmd, shown) = command(
            "torchrun",
            2,
            Path::new("/tmp/h p.py"),
            &["--nccl-only".to_string()],
        );
        assert_eq!(
            shown,
            "NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --standalone --nproc-per-node 2 '/tmp/h p.py' --nccl-only"
        );
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs
            .iter()
            .any(|(k, v)| *k == "NCCL_NVLS_ENABLE" && *v == Some("0".as_ref())));
    }

    #[test]
    fn results_of_several_ranks_in_rank_order() {
        let output = "noise\n[rank1]:HEADROOM_RESULT {\"measured\": {\"rank\": 1, \"nccl_bytes\": 7}}\nHEADROOM_RESULT {\"measured\": {\"rank\": 0, \"nccl_bytes\": 5}}\nHEADROOM_RESULT not json\n";
        let r = rank_results(output);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0]["measured"]["nccl_bytes"], 5);
        assert_eq!(r[1]["measured"]["nccl_bytes"], 7);
    }

    #[test]
    fn the_harness_has_the_nccl_only_mode() {
        assert!(PARALLEL_HARNESS.contains("--nccl-only"));
        assert!(PARALLEL_HARNESS.contains("HEADROOM_RESULT"));
    }
}
