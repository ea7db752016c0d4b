//! `headroom run`: sweep a workload over sequence lengths and
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

use crate::cases::Status;
use crate::error::{CollectorError, Result};
use crate::gpu::{self, Gpu};
use crate::stats::{relative_error, Summary};
use crate::template::{Template, Values, Var};
use headroom_core::arch::Dtype;
use headroom_core::estimate::{estimate_with, EstimateOptions};
use headroom_core::spec::{parse_model, parse_workload};
use headroom_core::workload::{Mode, MAX_BATCH, MAX_SEQ_LEN};
use headroom_core::RuntimeProfile;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The built-in harness, embedded at build time.
pub const HARNESS: &str = include_str!("../../python/headroom_measure.py");

/// Prefix of the line a job prints with torch's own counters.
pub const RESULT_PREFIX: &str = "HEADROOM_RESULT ";

/// Allowed `--poll-interval-us`: 50 us to 1 s.
pub const POLL_INTERVAL_US: RangeInclusive<u64> = 50..=1_000_000;
/// Allowed `--timeout-s`: 1 s to a week.
pub const TIMEOUT_S: RangeInclusive<u64> = 1..=604_800;
/// Allowed `--capacity`: 64 MiB to 1 TiB.
pub const CAPACITY_BYTES: RangeInclusive<u64> = (64 << 20)..=(1 << 40);

/// The harness's exit codes.
const HARNESS_UNSUPPORTED: i32 = 2;
const HARNESS_OOM: i32 = 3;

/// Options of `run` (its command-line flags).
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// Preset id for the built-in harness (with --cmd: used for predictions only).
    #[arg(long)]
    pub model: Option<String>,
    /// Workload JSON (the `workload` object of a measurement case); batch and length come from the sweep.
    #[arg(long)]
    pub workload: Option<String>,
    /// Spec file with `model` and `workload` (instead of --model/--workload).
    #[arg(long)]
    pub spec: Option<String>,
    /// Lengths: tokens, residues, or the image edge of vision models (comma-separated).
    #[arg(long, value_delimiter = ',', required_unless_present = "cases")]
    pub seq_lens: Vec<u32>,
    /// Batches (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batches: Vec<u32>,
    /// Python interpreter for the built-in harness (needs torch, transformers).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Your own job instead of the harness, with placeholders (see below).
    #[arg(long)]
    pub cmd: Option<String>,
    /// Output file, appended to (default: headroom-run-<model>-<time>.jsonl).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Seconds before a point is killed and recorded as failed (1 to 604800).
    #[arg(long, default_value_t = 1800)]
    pub timeout_s: u64,
    /// Pause between memory readings, microseconds (50 to 1000000; 200 gives about 2-4 kHz).
    #[arg(long, default_value_t = 200)]
    pub poll_interval_us: u64,
    /// Case-name prefix (default: <model>_<mode>).
    #[arg(long)]
    pub name: Option<String>,
    /// Print each point's command and prediction; run nothing (no GPU needed).
    #[arg(long)]
    pub dry_run: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// Echo the jobs' output.
    #[arg(long)]
    pub verbose: bool,
    /// Several GPUs: run each case on N GPUs of this node through
    /// `torchrun --standalone --nproc-per-node N` and the several-GPU harness
    /// (sets `workload.parallel.world_size`); one line per rank.
    #[arg(long, visible_alias = "nproc-per-node", value_name = "N")]
    pub nproc: Option<String>,
    /// Several GPUs: run the cases of this file (measurement cases with
    /// `workload.parallel`), each on its `world_size` GPUs (or --nproc).
    #[arg(long, value_name = "FILE")]
    pub cases: Option<String>,
    /// The torchrun to launch (--nproc, --cases).
    #[arg(long, default_value = "torchrun")]
    pub torchrun: String,
    /// Emulate a smaller card: torch's allocator may reserve at most BYTES
    /// (`torch.cuda.set_per_process_memory_fraction(BYTES / total)`), and
    /// frees its cache and retries at that limit as it does at the card's
    /// end. Give the smaller card's usable memory less the job's bytes
    /// outside the allocator (`estimate`'s `outside_allocator`). Recorded in
    /// each case as `allocator_limit_bytes`; the prediction says whether
    /// the job runs under it. Built-in harness only.
    #[arg(long, value_name = "BYTES")]
    pub capacity: Option<u64>,
    /// No progress bar or per-point lines (for callers other than the command line).
    #[arg(skip)]
    pub quiet: bool,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            model: None,
            workload: None,
            spec: None,
            seq_lens: Vec::new(),
            batches: vec![1],
            python: "python3".into(),
            cmd: None,
            out: None,
            device: 0,
            timeout_s: 1800,
            poll_interval_us: 200,
            name: None,
            dry_run: false,
            json: false,
            verbose: false,
            nproc: None,
            cases: None,
            torchrun: "torchrun".into(),
            capacity: None,
            quiet: false,
        }
    }
}

/// How points are launched.
#[derive(Clone, Debug)]
pub enum Launcher {
    /// The embedded harness, one case per process.
    Builtin {
        /// Interpreter.
        python: String,
    },
    /// The user's command.
    Cmd {
        /// The parsed template.
        template: Template,
        /// The template as given.
        text: String,
    },
}

/// One sweep point, before it runs.
#[derive(Clone, Debug)]
pub struct PointPlan {
    /// Case name.
    pub case: String,
    /// Preset id, when known (`custom` for a custom architecture).
    pub model: Option<String>,
    /// The model as the measurement line names it, so that `check` reads
    /// the same model back: the preset id, or the spec's custom architecture
    /// (or Hugging Face config) as given.
    pub model_spec: Option<Value>,
    /// The full workload JSON.
    pub workload: Value,
    /// Length (tokens, residues, image edge).
    pub seq_len: u32,
    /// Batch.
    pub batch: u32,
    /// The core's prediction, or why there is none.
    pub predicted: Value,
    /// `--capacity`: what torch's allocator may reserve.
    pub allocator_limit: Option<u64>,
}

/// Every point of a sweep.
#[derive(Clone, Debug)]
pub struct Plan {
    /// How points run.
    pub launcher: Launcher,
    /// The points, in order.
    pub points: Vec<PointPlan>,
}

fn check_values(flag: &str, values: &[u32], max: u64) -> Result<()> {
    if values.is_empty() {
        return Err(CollectorError::input(format!(
            "{flag}: give at least one value; allowed: comma-separated integers from 1 to {max}"
        )));
    }
    for &v in values {
        if v == 0 || v as u64 > max {
            return Err(CollectorError::input(format!(
                "{flag}: {v} is out of range; allowed: integers from 1 to {max}"
            )));
        }
    }
    Ok(())
}

fn check_range(flag: &str, value: u64, allowed: &RangeInclusive<u64>, unit: &str) -> Result<()> {
    if allowed.contains(&value) {
        return Ok(());
    }
    Err(CollectorError::input(format!(
        "{flag}: {value} is out of range; allowed: integers from {} to {} ({unit})",
        allowed.start(),
        allowed.end()
    )))
}

/// Checks the numeric flags that are not a sweep's values (those are checked
/// by [`plan`]): `--poll-interval-us` and `--timeout-s`.
pub fn check_flags(args: &RunArgs) -> Result<()> {
    check_range(
        "--poll-interval-us",
        args.poll_interval_us,
        &POLL_INTERVAL_US,
        "microseconds",
    )?;
    check_range("--timeout-s", args.timeout_s, &TIMEOUT_S, "seconds")?;
    if let Some(limit) = args.capacity {
        check_range("--capacity", limit, &CAPACITY_BYTES, "bytes")?;
        if args.cmd.is_some() || args.nproc.is_some() || args.cases.is_some() {
            return Err(CollectorError::input(
                "--capacity: the built-in harness on one GPU sets the limit; allowed with --model or --spec, not with --cmd, --nproc or --cases",
            ));
        }
    }
    Ok(())
}

/// Builds the sweep without touching a GPU.
pub fn plan(args: &RunArgs) -> Result<Plan> {
    check_values("--seq-lens", &args.seq_lens, MAX_SEQ_LEN)?;
    check_values("--batches", &args.batches, MAX_BATCH)?;
    let (model_value, workload_value) = base_spec(args)?;
    let launcher = match &args.cmd {
        Some(text) => {
            let template =
                Template::parse(text).map_err(|e| CollectorError::input(e.to_string()))?;
            let uses_len = template.uses(Var::SeqLen) || template.uses(Var::ImageSize);
            if !uses_len && args.seq_lens.len() > 1 {
                return Err(CollectorError::input(format!(
                    "--cmd: has no {{seq_len}} placeholder but --seq-lens gives {} lengths; every point would run the same job",
                    args.seq_lens.len()
                )));
            }
            if !template.uses(Var::Batch) && args.batches.len() > 1 {
                return Err(CollectorError::input(format!(
                    "--cmd: has no {{batch}} placeholder but --batches gives {} batches",
                    args.batches.len()
                )));
            }
            Launcher::Cmd {
                template,
                text: text.clone(),
            }
        }
        None => {
            if model_value.is_none() {
                return Err(CollectorError::input(
                    "run: give --model (or --spec) for the built-in harness, or --cmd for your own job",
                ));
            }
            Launcher::Builtin {
                python: args.python.clone(),
            }
        }
    };
    let model = match &model_value {
        None => None,
        Some(v) => {
            Some(parse_model(Some(v)).map_err(|e| CollectorError::input(format!("--model: {e}")))?)
        }
    };
    if let (Launcher::Builtin { .. }, Some(m)) = (&launcher, &model) {
        if m.id == "custom" {
            return Err(CollectorError::input(
                "--model: the built-in harness runs presets only (a preset id); measure a custom model with --cmd",
            ));
        }
    }
    let vision = model.as_ref().is_some_and(|m| m.arch.is_vision());
    // A preset by its canonical id; a custom architecture or a Hugging Face
    // config as given.
    let model_spec = model.as_ref().map(|m| match &model_value {
        Some(v) if m.id == "custom" => v.clone(),
        _ => json!(m.id),
    });
    let mut workload_json = workload_value.unwrap_or_else(|| json!({}));
    // A job described through its framework is swept as its knobs.
    if let Some(m) = &model {
        if headroom_core::spec::framework::is_framework_workload(&workload_json) {
            workload_json = headroom_core::spec::framework::lower(&workload_json, &m.arch)
                .map_err(|e| CollectorError::input(format!("--workload: {e}")))?
                .0;
        }
    }
    // A sweep measures inference unless `--workload` says otherwise; the
    // cases it writes say so explicitly.
    if let Some(obj) = workload_json.as_object_mut() {
        obj.entry("mode")
            .or_insert_with(|| json!(Mode::Inference.key()));
    }
    if let (Some(m), Some(obj)) = (&model, workload_json.as_object_mut()) {
        // ESMFold runs its trunk in fp32 (the reference and HF default).
        if m.arch.family() == "esm_fold" && !obj.contains_key("dtype") {
            obj.insert("dtype".into(), json!(Dtype::Fp32.key()));
        }
    }
    let base = parse_workload(Some(&workload_json))
        .map_err(|e| CollectorError::input(format!("--workload: {e}")))?;
    let prefix = args.name.clone().unwrap_or_else(|| match &model {
        Some(m) => format!("{}_{}", m.id, base.mode.key()),
        None => "cmd".into(),
    });
    let mut points = Vec::new();
    for &batch in &args.batches {
        for &len in &args.seq_lens {
            let mut w = base.with_length(vision, len);
            w.batch = batch;
            let case = format!("{prefix}_b{batch}_{}{len}", if vision { "r" } else { "L" });
            let predicted = match &model {
                None => json!({"skipped": "no model given"}),
                Some(m) => fresh_process_prediction(&m.arch, &w, args.capacity),
            };
            let workload = if let Some(m) = &model {
                let mut v = serde_json::to_value(&w).expect("workload serialises");
                if m.arch.family() == "esm_fold" {
                    // HF's ESMFold takes no attn_implementation (the harness
                    // would pass one); the public ESMFold cases have none.
                    if let Some(obj) = v.as_object_mut() {
                        obj.remove("attention");
                    }
                }
                v
            } else {
                json!({"batch": batch, "seq_len": len})
            };
            points.push(PointPlan {
                case,
                model: model.as_ref().map(|m| m.id.clone()),
                model_spec: model_spec.clone(),
                workload,
                seq_len: len,
                batch,
                predicted,
                allocator_limit: args.capacity,
            });
        }
    }
    Ok(Plan { launcher, points })
}

/// The spec's `model` and `workload` values from `--spec` or `--model`/`--workload`.
fn base_spec(args: &RunArgs) -> Result<(Option<Value>, Option<Value>)> {
    if let Some(path) = &args.spec {
        if args.model.is_some() || args.workload.is_some() {
            return Err(CollectorError::input(
                "--spec: give either --spec or --model/--workload, not both",
            ));
        }
        let text = crate::cases::read_text(path)?;
        let value = headroom_core::spec::json::parse(&text)
            .map_err(|e| CollectorError::input(format!("{path}: {e}")))?;
        let model = value.get("model").cloned();
        if model.is_none() {
            return Err(CollectorError::input(format!(
                "{path}: `model` is missing; allowed: a preset id or a custom architecture"
            )));
        }
        return Ok((model, value.get("workload").cloned()));
    }
    let workload = match &args.workload {
        None => None,
        Some(text) => {
            let v = headroom_core::spec::json::parse(text)
                .map_err(|e| CollectorError::input(format!("--workload: {e}")))?;
            if !v.is_object() {
                return Err(CollectorError::input(
                    "--workload: not a JSON object; allowed: the `workload` object of a measurement case",
                ));
            }
            Some(v)
        }
    };
    Ok((args.model.clone().map(Value::String), workload))
}

/// The model's prediction for a job run in a fresh process (no earlier
/// backward pass), as a measurement line's `predicted` object, or why it
/// was skipped.
///
/// Under an allocator limit (`--capacity`) the replay frees its cache and
/// retries at the limit, and `fits` says whether the job runs under it.
pub fn fresh_process_prediction(
    arch: &headroom_core::arch::Architecture,
    workload: &headroom_core::Workload,
    allocator_limit: Option<u64>,
) -> Value {
    let runtime = RuntimeProfile {
        process_ran_backward: false,
        ..RuntimeProfile::default()
    };
    let options = EstimateOptions {
        allocator_limit,
        ..EstimateOptions::default()
    };
    match estimate_with(arch, workload, &runtime, options) {
        Ok(e) => {
            let mut v = json!({
                "driver_peak": e.driver_peak,
                "reserved_peak": e.reserved_peak,
                "allocated_peak": e.allocated_peak,
                "outside_allocator": e.outside_allocator,
                "peak_op": e.peak_op,
            });
            if allocator_limit.is_some() {
                v["fits"] = json!(e.fits);
            }
            v
        }
        Err(e) => json!({"skipped": e.to_string()}),
    }
}

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

/// What `run` did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RunOutcome {
    /// The output file.
    pub file: String,
    /// Points written.
    pub points: usize,
    /// Of which finished normally.
    pub ok: usize,
    /// Of which ran out of memory.
    pub oom: usize,
    /// Of which failed.
    pub failed: usize,
    /// Interrupted by Ctrl-C (finished points are in the file).
    pub interrupted: bool,
    /// Summary of (predicted - measured) / measured over ok points with a prediction.
    pub summary: Option<Summary>,
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

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Makes Ctrl-C set the flag it returns (cleared here) instead of ending
/// the collector, so that finished points are kept.
pub fn install_ctrl_c() -> &'static AtomicBool {
    // A second install (tests) fails harmlessly: the first handler sets the same flag.
    let _ = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst));
    INTERRUPTED.store(false, Ordering::SeqCst);
    &INTERRUPTED
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

fn default_out(plan: &Plan) -> PathBuf {
    let stem = plan
        .points
        .first()
        .and_then(|p| p.model.clone())
        .unwrap_or_else(|| "cmd".into());
    PathBuf::from(format!(
        "headroom-run-{stem}-{}.jsonl",
        chrono::Local::now().format("%Y%m%d-%H%M%S")
    ))
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

/// This collector's own executable: the child that reads the GPUs' facts
/// ([`Gpu::watch`]).
pub fn collector_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| CollectorError::io("(current executable)", e))
}

/// Runs the sweep.
pub fn execute(args: &RunArgs) -> Result<(RunOutcome, Option<String>)> {
    check_flags(args)?;
    if crate::parallel_run::wanted(args) {
        return crate::parallel_run::execute(args);
    }
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
    let out_path = args.out.clone().unwrap_or_else(|| default_out(&plan));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&out_path)
        .map_err(|e| CollectorError::io(&out_path, e))?;
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
        if INTERRUPTED.load(Ordering::SeqCst) {
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
        let text = serde_json::to_string(&line).expect("line serialises");
        writeln!(file, "{text}")
            .and_then(|_| file.flush())
            .map_err(|e| CollectorError::io(&out_path, e))?;
        let _ = file.sync_data();
        outcome.points += 1;
        let measured_gb = m.driver_peak as f64 / 1e9;
        let mut note = match m.status {
            Status::Ok => {
                outcome.ok += 1;
                format!("driver peak {measured_gb:.3} GB")
            }
            Status::Oom => {
                outcome.oom += 1;
                oom_note(m.capacity, m.baseline)
            }
            Status::Failed => {
                outcome.failed += 1;
                format!("failed: {}", m.error.clone().unwrap_or_default())
            }
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
    if !errors.is_empty() {
        outcome.summary = Some(Summary::of(&errors));
    }
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

#[derive(Default)]
struct ChildOutput {
    result: Option<Value>,
    result_at: Option<Instant>,
    tail: Vec<String>,
}

fn collect(
    stream: impl std::io::Read + Send + 'static,
    sink: Arc<Mutex<ChildOutput>>,
    echo: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream)
            .lines()
            .map_while(std::io::Result::ok)
        {
            if echo {
                eprintln!("  | {line}");
            }
            let mut out = sink.lock().expect("not poisoned");
            if let Some(json) = line.strip_prefix(RESULT_PREFIX) {
                if let Ok(v) = serde_json::from_str::<Value>(json) {
                    out.result = Some(v);
                    out.result_at = Some(Instant::now());
                    continue;
                }
            }
            out.tail.push(line);
            if out.tail.len() > 40 {
                out.tail.remove(0);
            }
        }
    })
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
    let sink = Arc::new(Mutex::new(ChildOutput::default()));
    let readers = [
        collect(
            child.stdout.take().expect("piped"),
            sink.clone(),
            args.verbose,
        ),
        collect(
            child.stderr.take().expect("piped"),
            sink.clone(),
            args.verbose,
        ),
    ];
    let timeout = Duration::from_secs(args.timeout_s.max(1));
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
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
    for r in readers {
        let _ = r.join();
    }
    let output = std::mem::take(&mut *sink.lock().expect("not poisoned"));
    let tail = output.tail.join("\n");
    let exit_code = status.and_then(|s| s.code());
    let (status, error) = if timed_out {
        (
            Status::Failed,
            Some(format!("timed out after {} s", args.timeout_s)),
        )
    } else {
        classify_exit(launcher, exit_code, output.result.as_ref(), &tail)
    };
    let process_peak = poll.peak_used.saturating_sub(baseline);
    let case_seconds = output
        .result
        .as_ref()
        .and_then(|r| r.get("measured").unwrap_or(r).get("seconds"))
        .and_then(Value::as_f64);
    let case_peak = match (status, output.result_at, case_seconds) {
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
        result: output.result,
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
mod tests;

#[cfg(test)]
mod roundtrip_tests;

#[cfg(test)]
mod flag_tests {
    use super::*;

    #[test]
    fn numeric_flags_are_range_checked_naming_the_flag() {
        assert!(check_flags(&RunArgs::default()).is_ok());
        for (args, want) in [
            (
                RunArgs {
                    poll_interval_us: 0,
                    ..RunArgs::default()
                },
                "--poll-interval-us: 0 is out of range; allowed: integers from 50 to 1000000 (microseconds)",
            ),
            (
                RunArgs {
                    poll_interval_us: u64::MAX,
                    ..RunArgs::default()
                },
                "--poll-interval-us: 18446744073709551615 is out of range",
            ),
            (
                RunArgs {
                    timeout_s: 0,
                    ..RunArgs::default()
                },
                "--timeout-s: 0 is out of range; allowed: integers from 1 to 604800 (seconds)",
            ),
        ] {
            let e = check_flags(&args).unwrap_err();
            assert!(e.to_string().starts_with(want), "{e}");
            assert_eq!(e.exit_code(), crate::error::EXIT_INPUT);
        }
        for ok in [50, 1_000_000] {
            assert!(check_flags(&RunArgs {
                poll_interval_us: ok,
                ..RunArgs::default()
            })
            .is_ok());
        }
    }

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
