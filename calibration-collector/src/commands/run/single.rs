//! `headroom run` on one GPU: sweep a workload over sequence lengths and
//! batches, each point in a fresh process, measuring its peak from outside.
//!
//! The job is either the built-in harness (`python/headroom_measure.py`,
//! embedded in the binary, run with `--python`) on a preset, or the user's
//! own command (`--cmd` with placeholders). A poller thread reads the
//! device-wide used memory (NVML's `nvmlDeviceGetMemoryInfo`, from outside:
//! the collector holds no CUDA context, so the job has the card as it would
//! alone) at 1 kHz or faster from before the child starts until it has
//! exited; the driver-level peak is the highest reading minus the reading
//! taken just before the start, and what the job could use is NVML's total
//! minus that reading. Every finished point is appended to the output file
//! and flushed at once.

use super::child_output::Reader;
use super::{
    append_line, collector_exe, default_out, install_ctrl_c, interrupted, open_out, plan, Launcher,
    Plan, PointPlan, RunArgs, RunOutcome, RESULT_PREFIX,
};
use crate::cases::Status;
use crate::error::{CollectorError, Result};
use crate::gpu::{self, Gpu};
use crate::stats::relative_error;
use crate::template::Values;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The built-in harness, embedded at build time.
pub const HARNESS: &str = include_str!("../../../python/headroom_measure.py");

/// The harness's exit codes.
const HARNESS_UNSUPPORTED: i32 = 2;
const HARNESS_OOM: i32 = 3;

/// The process for one point, and how to show it.
pub fn command_for(
    launcher: &Launcher,
    point: &PointPlan,
    harness: &Path,
) -> Result<(Command, String)> {
    match launcher {
        Launcher::Builtin { python } => {
            let case = case_json(point).to_string();
            let mut cmd = Command::new(python);
            cmd.arg(harness).arg("--case-json").arg(&case);
            let shown = shlex::try_join([
                python.as_str(),
                &harness.display().to_string(),
                "--case-json",
                &case,
            ])
            .unwrap_or_default();
            Ok((cmd, shown))
        }
        Launcher::Cmd { template, .. } => {
            let line = template
                .render(&Values {
                    seq_len: point.seq_len,
                    batch: point.batch,
                    case: &point.case,
                    model: point.model.as_deref().unwrap_or(""),
                })
                .map_err(|e| CollectorError::input(e.to_string()))?;
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(&line);
            Ok((cmd, line))
        }
    }
}

/// The case object the harness gets.
pub fn case_json(point: &PointPlan) -> Value {
    let mut case = json!({"case": point.case, "model": point.model, "workload": point.workload});
    if let Some(limit) = point.allocator_limit {
        case["allocator_limit_bytes"] = json!(limit);
    }
    case
}

/// How a finished child is classified.
pub fn classify_exit(
    launcher: &Launcher,
    exit_code: Option<i32>,
    result: Option<&Value>,
    output_tail: &str,
) -> (Status, Option<String>) {
    let reported_oom = result
        .and_then(|r| r.get("measured"))
        .and_then(|m| m.get("oom"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let reported_error = result
        .and_then(|r| r.get("measured"))
        .and_then(|m| m.get("error").or_else(|| m.get("unsupported")))
        .and_then(Value::as_str)
        .map(str::to_string);
    let text_oom = {
        let t = output_tail.to_ascii_lowercase();
        t.contains("out of memory") || t.contains("outofmemoryerror")
    };
    match (launcher, exit_code) {
        (_, None) => (Status::Failed, Some("killed by a signal".into())),
        (Launcher::Builtin { .. }, Some(HARNESS_OOM)) => (Status::Oom, reported_error),
        (Launcher::Builtin { .. }, Some(HARNESS_UNSUPPORTED)) => (
            Status::Failed,
            Some(format!(
                "the harness does not support this workload: {}",
                reported_error.unwrap_or_default()
            )),
        ),
        (_, Some(0)) if reported_oom => (Status::Oom, reported_error),
        (_, Some(0)) => (Status::Ok, None),
        (_, Some(code)) if reported_oom || text_oom => (
            Status::Oom,
            Some(reported_error.unwrap_or_else(|| format!("exit code {code}, out of memory"))),
        ),
        (_, Some(code)) => (
            Status::Failed,
            Some(reported_error.unwrap_or_else(|| {
                let last = output_tail.lines().last().unwrap_or("").trim();
                format!("exit code {code}: {last}")
            })),
        ),
    }
}

/// The text shown by `--dry-run`.
pub fn render_dry_run(plan: &Plan, harness: &Path) -> Result<String> {
    let mut out = String::new();
    for p in &plan.points {
        let (_, shown) = command_for(&plan.launcher, p, harness)?;
        let pred = match p.predicted.get("driver_peak").and_then(Value::as_u64) {
            Some(b) => match (
                p.allocator_limit,
                p.predicted.get("fits").and_then(Value::as_bool),
            ) {
                (Some(limit), Some(fits)) => format!(
                    "predicted {:.3} GB; under the allocator limit of {limit} B it {}",
                    b as f64 / 1e9,
                    if fits { "runs" } else { "runs out of memory" }
                ),
                _ => format!("predicted {:.3} GB", b as f64 / 1e9),
            },
            None => format!(
                "no prediction ({})",
                p.predicted
                    .get("skipped")
                    .and_then(Value::as_str)
                    .unwrap_or("")
            ),
        };
        out.push_str(&format!("# {}: {pred}\n{shown}\n", p.case));
    }
    Ok(out)
}

/// Writes the embedded harness to a temporary file, removed on drop.
struct HarnessFile(PathBuf);

impl HarnessFile {
    fn write() -> Result<HarnessFile> {
        let path = std::env::temp_dir().join(format!("headroom_measure-{}.py", std::process::id()));
        std::fs::write(&path, HARNESS).map_err(|e| CollectorError::io(&path, e))?;
        Ok(HarnessFile(path))
    }
}

impl Drop for HarnessFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// CUDA_VISIBLE_DEVICES for the child so that it sees exactly GPU `device`
/// of this process's numbering.
fn child_visible_devices(device: usize) -> String {
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .nth(device)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| device.to_string()),
        _ => device.to_string(),
    }
}

/// Runs the sweep on one GPU (the flags checked by [`super::execute`]).
pub fn execute(args: &RunArgs) -> Result<(RunOutcome, Option<String>)> {
    let plan = plan(args)?;
    if args.dry_run {
        let shown = render_dry_run(&plan, Path::new("<harness>/headroom_measure.py"))?;
        return Ok((RunOutcome::default(), Some(shown)));
    }
    // The GPU is read from outside: this process never initialises CUDA.
    let (mut gpus, versions) = Gpu::watch(&collector_exe()?, Some(args.device))?;
    let gpu = gpus.remove(0);
    let harness = match plan.launcher {
        Launcher::Builtin { .. } => Some(HarnessFile::write()?),
        Launcher::Cmd { .. } => None,
    };
    let harness_path = harness.as_ref().map_or_else(PathBuf::new, |h| h.0.clone());
    let out_path = args.out.clone().unwrap_or_else(|| {
        let stem = plan.points.first().and_then(|p| p.model.as_deref());
        default_out(stem.unwrap_or("cmd"))
    });
    let mut file = open_out(&out_path)?;
    install_ctrl_c();

    let pb = if args.quiet {
        ProgressBar::hidden()
    } else {
        let pb = ProgressBar::new(plan.points.len() as u64);
        pb.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed} < {eta}]")
                .expect("template"),
        );
        pb.enable_steady_tick(Duration::from_millis(200));
        pb
    };
    let say = |line: String| {
        if args.quiet {
        } else if pb.is_hidden() {
            eprintln!("{line}");
        } else {
            pb.println(line);
        }
    };
    let mut outcome = RunOutcome {
        file: out_path.display().to_string(),
        ..RunOutcome::default()
    };
    let mut errors = Vec::new();
    for point in &plan.points {
        if interrupted() {
            outcome.interrupted = true;
            break;
        }
        pb.set_message(point.case.clone());
        let (mut command, _) = command_for(&plan.launcher, point, &harness_path)?;
        command.env("CUDA_VISIBLE_DEVICES", child_visible_devices(args.device));
        command.env("PYTHONUNBUFFERED", "1");
        let Some(m) = measure(&gpu, command, &plan.launcher, args)? else {
            outcome.interrupted = true;
            break;
        };
        let line = point_line(point, &plan.launcher, &gpu.info, &versions, &m);
        append_line(&mut file, &out_path, &line)?;
        outcome.record(m.status);
        let measured_gb = m.driver_peak as f64 / 1e9;
        let mut note = match m.status {
            Status::Ok => format!("driver peak {measured_gb:.3} GB"),
            Status::Oom => oom_note(m.capacity, m.baseline),
            Status::Failed => format!("failed: {}", m.error.clone().unwrap_or_default()),
        };
        if let (Status::Ok, Some(p)) = (
            m.status,
            point.predicted.get("driver_peak").and_then(Value::as_u64),
        ) {
            let e = relative_error(p, m.driver_peak);
            errors.push(e);
            note.push_str(&format!(
                ", predicted {:.3} GB ({:+.1}%)",
                p as f64 / 1e9,
                e * 100.0
            ));
        }
        say(format!("{}: {note}", point.case));
        pb.inc(1);
    }
    pb.finish_and_clear();
    outcome.summarise(&errors);
    drop(harness);
    Ok((outcome, None))
}

/// The line printed for a point that ran out of memory: what the job could
/// use (NVML's total less what was in use when it started).
pub fn oom_note(capacity: u64, used_before: u64) -> String {
    format!(
        "out of memory (the job could use {:.2} GB: the GPU's {:.2} GB less {:.2} GB the driver and other processes held when it started)",
        capacity as f64 / 1e9,
        (capacity + used_before) as f64 / 1e9,
        used_before as f64 / 1e9
    )
}

/// What one point measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// How it ended.
    pub status: Status,
    /// Why it failed or ran out of memory.
    pub error: Option<String>,
    /// Highest used bytes during the case minus the baseline: the case is the
    /// `measured.seconds` the job reports, ending when it printed its result
    /// line (as the public measurements count it); the whole process when
    /// the job reports no duration.
    pub driver_peak: u64,
    /// Highest used bytes over the whole process minus the baseline (model
    /// construction included): what decides an OOM of the whole job.
    pub process_peak: u64,
    /// `case` or `process`: what `driver_peak` covers.
    pub peak_window: &'static str,
    /// Used bytes before the child started (NVML: the driver's reservation
    /// and other processes; the collector holds none).
    pub baseline: u64,
    /// What the job could use: NVML's total less `baseline`.
    pub capacity: u64,
    /// Poller statistics.
    pub poll: gpu::PollStats,
    /// Wall time of the child process.
    pub process_seconds: f64,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// The job's `HEADROOM_RESULT` object, if it printed one.
    pub result: Option<Value>,
}

/// The job's result line: [`RESULT_PREFIX`] at the start of the line, then
/// JSON. One process has one slot; its last result line wins.
fn result_line(line: &str) -> Option<(u64, Value)> {
    let json = line.strip_prefix(RESULT_PREFIX)?;
    serde_json::from_str::<Value>(json).ok().map(|v| (0, v))
}

/// Runs one child under the poller. `None` when interrupted (nothing to keep).
fn measure(
    gpu: &Gpu,
    mut command: Command,
    launcher: &Launcher,
    args: &RunArgs,
) -> Result<Option<Measurement>> {
    let baseline = gpu.settled_used(10, Duration::from_millis(1))?;
    let capacity = gpu.available(baseline);
    let poller = gpu.start_poller(Duration::from_micros(args.poll_interval_us));
    let start = Instant::now();
    let mut child = match command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            poller.finish();
            return Err(CollectorError::input(format!(
                "could not start the job ({e}); check --python or --cmd"
            )));
        }
    };
    let reader = Reader::start(&mut child, args.verbose, result_line, 40);
    let timeout = Duration::from_secs(args.timeout_s.max(1));
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        if interrupted() {
            let _ = child.kill();
            let _ = child.wait();
            poller.finish();
            return Ok(None);
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().ok();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let process_seconds = start.elapsed().as_secs_f64();
    let poll = poller.finish();
    let output = reader.finish();
    let tail = output.tail.join("\n");
    let (result, result_at) = match output.results.into_values().next() {
        Some((v, at)) => (Some(v), Some(at)),
        None => (None, None),
    };
    let exit_code = status.and_then(|s| s.code());
    let (status, error) = if timed_out {
        (
            Status::Failed,
            Some(format!("timed out after {} s", args.timeout_s)),
        )
    } else {
        classify_exit(launcher, exit_code, result.as_ref(), &tail)
    };
    let process_peak = poll.peak_used.saturating_sub(baseline);
    let case_seconds = result
        .as_ref()
        .and_then(|r| r.get("measured").unwrap_or(r).get("seconds"))
        .and_then(Value::as_f64);
    let case_peak = match (status, result_at, case_seconds) {
        (Status::Ok, Some(end), Some(secs)) => poll.peak_before(end, secs),
        _ => None,
    };
    let (driver_peak, peak_window) = match case_peak {
        Some(p) => (p.saturating_sub(baseline), "case"),
        None => (process_peak, "process"),
    };
    Ok(Some(Measurement {
        status,
        error,
        driver_peak,
        process_peak,
        peak_window,
        baseline,
        capacity,
        poll,
        process_seconds,
        exit_code,
        result,
    }))
}

/// The output line of one point: a measurement case with the prediction beside it.
pub fn point_line(
    point: &PointPlan,
    launcher: &Launcher,
    gpu: &gpu::DeviceInfo,
    versions: &gpu::DriverVersions,
    m: &Measurement,
) -> Value {
    let result = m.result.clone().unwrap_or(Value::Null);
    let reported = result
        .get("measured")
        .cloned()
        .unwrap_or_else(|| result.clone());
    let mut measured = Map::new();
    measured.insert("driver_peak".into(), json!(m.driver_peak));
    measured.insert("process_peak".into(), json!(m.process_peak));
    measured.insert("peak_window".into(), json!(m.peak_window));
    for key in ["alloc_peak", "reserved_peak", "resident_before", "seconds"] {
        if let Some(v) = reported.get(key).filter(|v| !v.is_null()) {
            measured.insert(key.into(), v.clone());
        }
    }
    measured.insert(
        "status".into(),
        serde_json::to_value(m.status).expect("status"),
    );
    // What the job could use, recorded for every point (decisive for one
    // that ran out of memory).
    measured.insert("capacity_bytes".into(), json!(m.capacity));
    if let Some(e) = &m.error {
        measured.insert("error".into(), json!(e));
    }
    measured.insert(
        "process_seconds".into(),
        json!((m.process_seconds * 1000.0).round() / 1000.0),
    );
    measured.insert("baseline_used_bytes".into(), json!(m.baseline));
    measured.insert("poll_hz".into(), json!(m.poll.hz.round()));
    measured.insert("poll_samples".into(), json!(m.poll.samples));
    if m.poll.errors > 0 {
        measured.insert("poll_errors".into(), json!(m.poll.errors));
    }
    measured.insert("exit_code".into(), json!(m.exit_code));

    let mut runtime = match result.get("runtime") {
        Some(Value::Object(r)) => r.clone(),
        _ => Map::new(),
    };
    runtime.insert("gpu".into(), json!(gpu.name));
    runtime.insert("gpu_total_bytes".into(), json!(gpu.total_bytes));
    if runtime.get("driver").is_none_or(Value::is_null) {
        runtime.insert("driver".into(), json!(versions.driver));
    }
    // Every point runs in a fresh process: no earlier backward pass.
    runtime
        .entry("process_ran_backward")
        .or_insert_with(|| json!(false));
    runtime.entry("allocator").or_insert_with(|| {
        json!(std::env::var("PYTORCH_CUDA_ALLOC_CONF").unwrap_or_else(|_| "default".into()))
    });

    let mut predicted = point.predicted.clone();
    if let (Status::Ok, Some(p)) = (
        m.status,
        predicted.get("driver_peak").and_then(Value::as_u64),
    ) {
        let e = relative_error(p, m.driver_peak);
        predicted["error"] = json!((e * 10000.0).round() / 10000.0);
    }
    let (harness, cmd) = match launcher {
        Launcher::Builtin { .. } => ("builtin", None),
        Launcher::Cmd { text, .. } => ("cmd", Some(text.clone())),
    };
    let mut line = Map::new();
    line.insert("case".into(), json!(point.case));
    if let Some(model) = &point.model_spec {
        line.insert("model".into(), model.clone());
    }
    for key in ["params", "weight_bytes"] {
        if let Some(v) = result.get(key).filter(|v| !v.is_null()) {
            line.insert(key.into(), v.clone());
        }
    }
    line.insert("workload".into(), point.workload.clone());
    // `--capacity`: the limit the point ran under, which `check` replays.
    if let Some(limit) = point.allocator_limit {
        line.insert("allocator_limit_bytes".into(), json!(limit));
    }
    line.insert("runtime".into(), Value::Object(runtime));
    line.insert("measured".into(), Value::Object(measured));
    line.insert("predicted".into(), predicted);
    let mut collector = json!({
        "version": env!("CARGO_PKG_VERSION"),
        "harness": harness,
        "device": gpu.ordinal,
        "compute_capability": gpu.compute_capability,
        "cuda_driver_api": versions.cuda_driver_api,
    });
    if let Some(cmd) = cmd {
        collector["cmd"] = json!(cmd);
    }
    line.insert("collector".into(), collector);
    Value::Object(line)
}

#[cfg(test)]
mod oom_tests {
    use super::*;

    #[test]
    fn the_oom_line_says_what_the_job_could_use() {
        // An idle H200: NVML's total less the driver's reservation.
        let note = oom_note(150_109_880_320, 644_939_776);
        assert_eq!(
            note,
            "out of memory (the job could use 150.11 GB: the GPU's 150.75 GB less 0.64 GB the driver and other processes held when it started)"
        );
    }
}
