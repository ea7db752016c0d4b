//! `headroom run`: the entry ([`execute`] sends one GPU to [`single`],
//! `--nproc`/`--cases` to [`parallel`]) and what both use: the flags and
//! their checks, the sweep's [`plan`] and prediction, the result prefix, the
//! output file, Ctrl-C and the [`RunOutcome`].
//!
//! Dependencies run one way: [`single`] and [`parallel`] use this module and
//! [`child_output`] (through [`torchrun`] for several GPUs), never each
//! other; this module names them only to dispatch.

pub mod child_output;
pub mod parallel;
pub mod single;
pub mod torchrun;

use crate::cases::Status;
use crate::error::{CollectorError, Result};
use crate::stats::Summary;
use crate::template::{Template, Var};
use headroom_core::arch::Dtype;
use headroom_core::estimate::{estimate_with, EstimateOptions};
use headroom_core::readers::{parse_model, parse_workload};
use headroom_core::workload::{Mode, MAX_BATCH, MAX_SEQ_LEN};
use headroom_core::RuntimeProfile;
use serde_json::{json, Value};
use std::fs::File;
use std::io::Write;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Prefix of the line a job prints with torch's own counters.
pub const RESULT_PREFIX: &str = "HEADROOM_RESULT ";

/// Allowed `--poll-interval-us`: 50 us to 1 s.
pub const POLL_INTERVAL_US: RangeInclusive<u64> = 50..=1_000_000;
/// Allowed `--timeout-s`: 1 s to a week.
pub const TIMEOUT_S: RangeInclusive<u64> = 1..=604_800;
/// Allowed `--capacity`: 64 MiB to 1 TiB.
pub const CAPACITY_BYTES: RangeInclusive<u64> = (64 << 20)..=(1 << 40);

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
        if headroom_core::readers::framework::is_framework_workload(&workload_json) {
            workload_json = headroom_core::readers::framework::lower(&workload_json, &m.arch)
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
        let value = headroom_core::readers::json::parse(&text)
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
            let v = headroom_core::readers::json::parse(text)
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

impl RunOutcome {
    /// Counts one written line that ended with `status`.
    fn record(&mut self, status: Status) {
        self.points += 1;
        match status {
            Status::Ok => self.ok += 1,
            Status::Oom => self.oom += 1,
            Status::Failed => self.failed += 1,
        }
    }

    /// Sets the summary of the prediction errors, when there are any.
    fn summarise(&mut self, errors: &[f64]) {
        if !errors.is_empty() {
            self.summary = Some(Summary::of(errors));
        }
    }
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

/// True once Ctrl-C was pressed after [`install_ctrl_c`].
fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// This collector's own executable: the child that reads the GPUs' facts
/// ([`crate::gpu::Gpu::watch`]).
pub fn collector_exe() -> Result<PathBuf> {
    std::env::current_exe().map_err(|e| CollectorError::io("(current executable)", e))
}

/// The default output file, `headroom-run-<stem>-<time>.jsonl`.
fn default_out(stem: &str) -> PathBuf {
    PathBuf::from(format!(
        "headroom-run-{stem}-{}.jsonl",
        chrono::Local::now().format("%Y%m%d-%H%M%S")
    ))
}

/// Opens the output file for appending (created when missing).
fn open_out(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| CollectorError::io(path, e))
}

/// Appends one measurement line to the output file and flushes it at once,
/// so that a point is kept however the run ends.
fn append_line(file: &mut File, path: &Path, line: &Value) -> Result<()> {
    let text = serde_json::to_string(line).expect("line serialises");
    writeln!(file, "{text}")
        .and_then(|_| file.flush())
        .map_err(|e| CollectorError::io(path, e))?;
    let _ = file.sync_data();
    Ok(())
}

/// Runs the sweep: on several GPUs through torchrun ([`parallel`]) when
/// `--nproc` or `--cases` asks for it, else one point at a time on one GPU
/// ([`single`]).
pub fn execute(args: &RunArgs) -> Result<(RunOutcome, Option<String>)> {
    check_flags(args)?;
    if parallel::wanted(args) {
        return parallel::execute(args);
    }
    single::execute(args)
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
}
