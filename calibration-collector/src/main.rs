//! `calibration-collector`: estimate, check, probe, run, fit, upload.
//!
//! Exit codes: 0 ok; 1 bad input (the message names the file, line or
//! field); 2 no NVIDIA driver or GPU; 3 a GPU or measurement step failed;
//! 4 the upload failed; 130 interrupted (finished points are kept).

use anyhow::Result;
use calibration_collector::error::CollectorError;
use calibration_collector::{
    cases, check, estimate_cmd, fit, gpu, gpus_cmd, probe, profile, run, upload,
};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "calibration-collector",
    version,
    about = "Predict, check and calibrate the peak GPU memory of PyTorch jobs (headroom).",
    after_help = "Exit codes: 0 ok, 1 bad input, 2 no NVIDIA driver/GPU, 3 GPU or measurement failure, 4 upload failed, 130 interrupted."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Estimate the peak memory of a spec ({model, workload, runtime}); no GPU needed.
    Estimate {
        /// Spec JSON file; `-` or nothing reads stdin. A measurement case works unchanged.
        spec: Option<String>,
        /// Print a readable table instead of JSON.
        #[arg(long)]
        table: bool,
        /// Also say whether the job fits this GPU of the catalog (e.g. `h200`).
        #[arg(long)]
        gpu: Option<String>,
        /// A spec of the same model that ran earlier in the same process (a notebook that
        /// trained before): its weights, optimizer state and workspaces stay where it put them.
        #[arg(long, value_name = "EARLIER_SPEC")]
        after: Option<String>,
    },
    /// Which GPUs of the catalog run a spec: longest length and largest batch per card,
    /// jobs per card and the reservation to request; for ESMFold also the longest
    /// protein with and without chunking and the chunk size that makes the length fit.
    Gpus {
        /// Spec JSON file; `-` or nothing reads stdin.
        spec: Option<String>,
        /// Safety margin added to the reservation, in percent.
        #[arg(long, default_value_t = 10)]
        margin: u32,
    },
    /// Compare predictions with measurement files; the last line is the summary.
    Check {
        /// Measurement files (JSON lines in the shared/calibration format, or profiles).
        #[arg(required = true)]
        files: Vec<String>,
        /// Only cases of this family (decoder, encoder, vit, esmfold, cnn) or model id.
        #[arg(long)]
        family: Option<String>,
        /// Only cases whose name contains this substring.
        #[arg(long)]
        filter: Option<String>,
        /// Use this calibration profile's runtime coefficients instead of the defaults.
        #[arg(long)]
        profile: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the GPUs and measure the CUDA context and first-cuBLAS overheads (needs a GPU).
    Probe {
        /// Only this GPU (CUDA ordinal); default: every visible GPU.
        #[arg(long)]
        device: Option<usize>,
        /// List the GPUs only; measure nothing.
        #[arg(long)]
        list: bool,
        /// Print JSON (what `fit --probe` reads).
        #[arg(long)]
        json: bool,
    },
    /// Measure a workload's peak over sequence lengths and batches, a fresh process per point (needs a GPU).
    #[command(
        after_help = "Examples:\n  calibration-collector run --model esmfold-v1 --seq-lens 64,256,512,1024 --out esmfold.jsonl\n  calibration-collector run --model llama-3.1-8b --workload '{\"dtype\":\"bf16\",\"inference\":{\"kind\":\"generate\",\"new_tokens\":16}}' --seq-lens 2048,8192 --batches 1,8\n  calibration-collector run --cmd 'python my_job.py --len {seq_len} --batch {batch}' --seq-lens 512,1024 --batches 1,4\n\nPlaceholders of --cmd: {seq_len} {batch} {image_size} {case} {model}; values are shell-quoted by the collector, so leave them unquoted. A job may print `HEADROOM_RESULT {\"alloc_peak\": N, \"reserved_peak\": N}` to record torch's own peaks."
    )]
    Run {
        /// Preset id for the built-in harness (with --cmd: used for predictions only).
        #[arg(long)]
        model: Option<String>,
        /// Workload JSON (the `workload` object of a measurement case); batch and length come from the sweep.
        #[arg(long)]
        workload: Option<String>,
        /// Spec file with `model` and `workload` (instead of --model/--workload).
        #[arg(long)]
        spec: Option<String>,
        /// Lengths: tokens, residues, or the image edge of vision models (comma-separated).
        #[arg(long, value_delimiter = ',', required = true)]
        seq_lens: Vec<u32>,
        /// Batches (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        batches: Vec<u32>,
        /// Python interpreter for the built-in harness (needs torch, transformers).
        #[arg(long, default_value = "python3")]
        python: String,
        /// Your own job instead of the harness, with placeholders (see below).
        #[arg(long)]
        cmd: Option<String>,
        /// Output file, appended to (default: headroom-run-<model>-<time>.jsonl).
        #[arg(long)]
        out: Option<PathBuf>,
        /// GPU (CUDA ordinal).
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Seconds before a point is killed and recorded as failed.
        #[arg(long, default_value_t = 1800)]
        timeout_s: u64,
        /// Pause between memory readings, microseconds (200 gives about 2-4 kHz).
        #[arg(long, default_value_t = 200)]
        poll_interval_us: u64,
        /// Case-name prefix (default: <model>_<mode>).
        #[arg(long)]
        name: Option<String>,
        /// Print each point's command and prediction; run nothing (no GPU needed).
        #[arg(long)]
        dry_run: bool,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
        /// Echo the jobs' output.
        #[arg(long)]
        verbose: bool,
    },
    /// Fit the runtime coefficients to measurement files and write a calibration profile.
    Fit {
        /// Measurement files (from `run`, or in the shared/calibration format).
        #[arg(required = true)]
        files: Vec<String>,
        /// A `probe --json` report: splits the overhead into context and cuBLAS.
        #[arg(long)]
        probe: Option<String>,
        /// Where to write the profile (default: calibration-profile-<gpu>-<date>.json).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace an existing output file.
        #[arg(long)]
        force: bool,
        /// Profile name (default: GPU, torch and driver versions).
        #[arg(long)]
        name: Option<String>,
        /// What the overhead is measured against: torch's reserved peak (auto: when every point has it) or the core's predicted one.
        #[arg(long, value_enum, default_value_t = fit::Basis::Auto)]
        basis: fit::Basis,
        /// Leave out cases whose name contains this (repeatable).
        #[arg(long)]
        exclude: Vec<String>,
        /// Print the profile as JSON instead of the report.
        #[arg(long)]
        json: bool,
    },
    /// Validate a profile and POST it as JSON (retries with backoff; the file is never changed).
    Upload {
        /// The profile file.
        profile: String,
        /// Where to POST it.
        #[arg(long)]
        to: String,
        /// Show what would be sent; send nothing.
        #[arg(long)]
        dry_run: bool,
        /// Retries after the first attempt (on connection errors, 408, 429, 5xx).
        #[arg(long, default_value_t = 4)]
        retries: u32,
        /// First backoff in milliseconds (doubles each retry, at most 30 s).
        #[arg(long, default_value_t = 1000)]
        backoff_ms: u64,
        /// Per-attempt timeout in seconds.
        #[arg(long, default_value_t = 30)]
        timeout_s: u64,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// (internal) The child side of `probe`.
    #[command(hide = true)]
    ProbeChild {
        #[arg(long)]
        device: usize,
        #[arg(long)]
        workspace_bytes: usize,
    },
}

fn main() {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let code = e
                .downcast_ref::<CollectorError>()
                .map_or(1, CollectorError::exit_code);
            eprintln!("error: {e:#}");
            std::process::exit(code);
        }
    }
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn json_line<T: serde::Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Estimate {
            spec,
            table,
            gpu,
            after,
        } => {
            let text = estimate_cmd::run(&estimate_cmd::EstimateArgs {
                spec,
                table,
                gpu,
                after,
            })?;
            print(&text)?;
        }
        Command::Gpus { spec, margin } => {
            let text = gpus_cmd::run(&gpus_cmd::GpusArgs {
                spec,
                margin_percent: margin,
            })?;
            print(&text)?;
        }
        Command::Check {
            files,
            family,
            filter,
            profile,
            json,
        } => {
            let profile = profile.map(|p| load_runtime(&p)).transpose()?;
            let report = check::compare(&check::CheckArgs {
                files,
                family,
                filter,
                profile,
            })?;
            print(&if json {
                json_line(&report)?
            } else {
                check::render(&report)
            })?;
        }
        Command::Probe { device, list, json } => {
            let report = probe::run(&probe::ProbeArgs {
                device,
                list_only: list,
                quiet: json,
            })?;
            print(&if json {
                json_line(&report)?
            } else {
                probe::render(&report)
            })?;
        }
        Command::ProbeChild {
            device,
            workspace_bytes,
        } => gpu::probe_child(device, workspace_bytes)?,
        Command::Run {
            model,
            workload,
            spec,
            seq_lens,
            batches,
            python,
            cmd,
            out,
            device,
            timeout_s,
            poll_interval_us,
            name,
            dry_run,
            json,
            verbose,
        } => {
            let args = run::RunArgs {
                model,
                workload,
                spec,
                seq_lens,
                batches,
                python,
                cmd,
                out,
                device,
                timeout_s,
                poll_interval_us,
                name,
                dry_run,
                quiet: false,
                verbose,
            };
            let (outcome, dry) = run::execute(&args)?;
            if let Some(text) = dry {
                print(&text)?;
                return Ok(0);
            }
            if json {
                print(&json_line(&outcome)?)?;
            } else {
                let mut text = format!(
                    "wrote {} point(s) to {} (ok {}, out of memory {}, failed {})\n",
                    outcome.points, outcome.file, outcome.ok, outcome.oom, outcome.failed
                );
                if let Some(s) = &outcome.summary {
                    text.push_str(&format!("{s}\n"));
                }
                print(&text)?;
            }
            if outcome.interrupted {
                return Err(CollectorError::Interrupted(format!(
                    "interrupted: the {} finished point(s) are kept in {}",
                    outcome.points, outcome.file
                ))
                .into());
            }
            if outcome.points > 0 && outcome.ok == 0 && outcome.oom == 0 {
                return Err(CollectorError::Gpu(format!(
                    "every point failed; see `measured.error` in {} (run with --verbose to see the jobs' output)",
                    outcome.file
                ))
                .into());
            }
        }
        Command::Fit {
            files,
            probe,
            out,
            force,
            name,
            basis,
            exclude,
            json,
        } => {
            let result = fit::run(&fit::FitArgs {
                files,
                probe,
                name,
                basis,
                exclude,
            })?;
            let path = out.unwrap_or_else(|| default_profile_path(&result.profile));
            if path.exists() && !force {
                return Err(CollectorError::input(format!(
                    "{}: exists; pass --force to replace it or --out to choose another file",
                    path.display()
                ))
                .into());
            }
            let text = serde_json::to_string_pretty(&result.profile)? + "\n";
            std::fs::write(&path, &text).map_err(|e| CollectorError::io(&path, e))?;
            if json {
                print(&text)?;
            } else {
                print(&format!(
                    "{}profile written to {}\n{}\n",
                    result.report,
                    path.display(),
                    result.profile.summary.after
                ))?;
            }
        }
        Command::Upload {
            profile,
            to,
            dry_run,
            retries,
            backoff_ms,
            timeout_s,
            json,
        } => {
            let args = upload::UploadArgs {
                profile,
                to,
                dry_run,
                retries,
                backoff_ms,
                timeout_s,
            };
            let (outcome, dry) = upload::run(&args, &profile::Identity::local())?;
            if let Some(text) = dry {
                print(&text)?;
            } else if let Some(o) = outcome {
                if json {
                    print(&json_line(&o)?)?;
                } else {
                    print(&format!(
                        "uploaded {} ({} bytes) to {}: HTTP {} after {} attempt(s); {}\n",
                        args.profile, o.payload_bytes, o.url, o.status, o.attempts, o.response
                    ))?;
                }
            }
        }
    }
    Ok(0)
}

fn default_profile_path(p: &profile::Profile) -> PathBuf {
    let slug: String = p
        .gpu
        .name
        .to_lowercase()
        .replace("nvidia", "")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    let date = p.created.get(..10).unwrap_or("undated");
    PathBuf::from(format!("calibration-profile-{slug}-{date}.json"))
}

/// `--profile` of `check`: a calibration profile, or any object with
/// `runtime`, or a bare runtime object.
fn load_runtime(path: &str) -> Result<headroom_core::RuntimeProfile> {
    let text = cases::read_text(path)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CollectorError::input(format!("{path}: malformed JSON: {e}")))?;
    if value.get("schema_version").is_some() {
        let p = profile::from_value(&value, &profile::Identity::default())
            .map_err(|e| CollectorError::input(format!("{path}: {e}")))?;
        return Ok(p.runtime);
    }
    let runtime = value.get("runtime").unwrap_or(&value);
    headroom_core::spec::parse_runtime(runtime)
        .map_err(|e| CollectorError::input(format!("{path}: {e}")).into())
}
