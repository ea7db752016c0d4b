//! `headroom`: estimate, gpus, check, probe, run, calibrate, fit, upload.
//!
//! Exit codes: 0 ok; 1 bad input (the message names the file, line or
//! field); 2 no NVIDIA driver or GPU; 3 a GPU or measurement step failed;
//! 4 the upload failed; 64 a wrong command line (unknown flag, missing
//! argument); 74 the answer could not be written (a closed pipe is not an
//! error); 130 interrupted (finished points are kept).

use anyhow::Result;
use calibration_collector::commands::{calibrate, check, estimate, fit, gpus, probe, run, upload};
use calibration_collector::error::{escape_controls, CollectorError, EXIT_USAGE};
use calibration_collector::{gpu, profile};
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "headroom",
    version,
    about = "Predict, check and calibrate the peak GPU memory of PyTorch jobs (headroom).",
    after_help = "Exit codes: 0 ok, 1 bad input, 2 no NVIDIA driver/GPU, 3 GPU or measurement failure, 4 upload failed, 64 wrong command line, 74 the answer could not be written, 130 interrupted."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Estimate the peak memory of a spec ({model, workload, runtime}); no GPU needed.
    Estimate(estimate::EstimateArgs),
    /// Which GPUs of the catalog run a spec: longest length and largest batch per card,
    /// jobs per card and the reservation to request; for ESMFold also the longest
    /// protein with and without chunking and the chunk size that makes the length fit.
    Gpus(gpus::GpusArgs),
    /// Compare predictions with measurement files; the last line is the summary.
    Check(check::CheckArgs),
    /// List the GPUs and measure the CUDA context and first-cuBLAS overheads (needs a GPU).
    Probe(probe::ProbeArgs),
    /// Measure a workload's peak over sequence lengths and batches, a fresh process per point (needs a GPU).
    #[command(
        after_help = "Examples:\n  headroom run --model esmfold-v1 --seq-lens 64,256,512,1024 --out esmfold.jsonl\n  headroom run --model llama-3.1-8b --workload '{\"dtype\":\"bf16\",\"inference\":{\"kind\":\"generate\",\"new_tokens\":16}}' --seq-lens 2048,8192 --batches 1,8\n  headroom run --cmd 'python my_job.py --len {seq_len} --batch {batch}' --seq-lens 512,1024 --batches 1,4\n\nPlaceholders of --cmd: {seq_len} {batch} {image_size} {case} {model}; values are shell-quoted by the collector, so leave them unquoted. A job may print `HEADROOM_RESULT {\"alloc_peak\": N, \"reserved_peak\": N}` to record torch's own peaks.\n\nTo calibrate a card (its profile for the page), `calibrate` runs the sweep that pins every runtime coefficient, with probe and fit, in one go."
    )]
    Run(run::RunArgs),
    /// Calibrate this card in one go (a few minutes): probe, the sweep that pins every
    /// runtime coefficient, fit; writes the profile that `upload` shares (needs a GPU).
    Calibrate(calibrate::CalibrateArgs),
    /// Fit the runtime coefficients to measurement files and write a calibration profile.
    Fit(fit::FitArgs),
    /// Validate a profile and POST it as JSON (retries with backoff; the file is never changed).
    Upload(upload::UploadArgs),
    /// (internal) The child side of `probe`.
    #[command(hide = true)]
    ProbeChild(ProbeChildArgs),
}

/// The child side of `probe`: measures one GPU from inside a fresh process.
#[derive(clap::Args, Debug)]
struct ProbeChildArgs {
    #[arg(long)]
    device: usize,
    #[arg(long)]
    workspace_bytes: usize,
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are answers; a flag's value that does
            // not parse (a number too large for it, say) is bad input, as a
            // value out of its range is (1); anything else is a wrong command
            // line, with its own exit code (2 means "no driver").
            let _ = e.print();
            let bad_value = matches!(
                e.kind(),
                clap::error::ErrorKind::ValueValidation | clap::error::ErrorKind::InvalidValue
            );
            std::process::exit(match (e.use_stderr(), bad_value) {
                (false, _) => 0,
                (true, true) => 1,
                (true, false) => EXIT_USAGE,
            });
        }
    };
    match dispatch(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let code = e
                .downcast_ref::<CollectorError>()
                .map_or(1, CollectorError::exit_code);
            eprintln!("error: {}", escape_controls(&format!("{e:#}")));
            std::process::exit(code);
        }
    }
}

/// Writes `text` to stdout, control characters escaped (it may hold case
/// names and messages from files).
fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(escape_controls(text).as_bytes())
        .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        // The reader went away (`| head`): nothing more to say to it.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(CollectorError::write("(standard output)", e).into()),
    }
}

fn json_line<T: serde::Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(value)? + "\n")
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Estimate(args) => print(&estimate::run(&args)?)?,
        Command::Gpus(args) => print(&gpus::run(&args)?)?,
        Command::Check(args) => print(&check::run(&args)?)?,
        Command::Probe(args) => {
            let report = probe::run(&args)?;
            print(&if args.json {
                json_line(&report)?
            } else {
                probe::render(&report)
            })?;
        }
        Command::ProbeChild(args) => gpu::probe_child(args.device, args.workspace_bytes)?,
        Command::Run(args) => run_points(&args)?,
        Command::Calibrate(args) => print(&calibrate::run(&args)?.report)?,
        Command::Fit(args) => fit_profile(&args)?,
        Command::Upload(args) => upload_profile(&args)?,
    }
    Ok(0)
}

/// `run`: the sweep, its outcome, and the exit code of an interrupted or
/// wholly failed sweep.
fn run_points(args: &run::RunArgs) -> Result<()> {
    let (outcome, dry) = run::execute(args)?;
    if let Some(text) = dry {
        return print(&text);
    }
    if args.json {
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
    Ok(())
}

/// `fit`: the profile, written where `--out` says (never over an existing
/// file without `--force`), and the report.
fn fit_profile(args: &fit::FitArgs) -> Result<()> {
    let result = fit::run(args)?;
    let path = args
        .out
        .clone()
        .unwrap_or_else(|| default_profile_path(&result.profile));
    if path.exists() && !args.force {
        return Err(CollectorError::input(format!(
            "{}: exists; pass --force to replace it or --out to choose another file",
            path.display()
        ))
        .into());
    }
    let text = serde_json::to_string_pretty(&result.profile)? + "\n";
    std::fs::write(&path, &text).map_err(|e| CollectorError::write(&path, e))?;
    if args.json {
        print(&text)
    } else {
        print(&format!(
            "{}profile written to {}\n{}\n",
            result.report,
            path.display(),
            result.profile.summary.after
        ))
    }
}

/// `upload`: the request shown (`--dry-run`) or the server's answer.
fn upload_profile(args: &upload::UploadArgs) -> Result<()> {
    let (outcome, dry) = upload::run(args, &profile::local_identity())?;
    if let Some(text) = dry {
        print(&text)?;
    } else if let Some(o) = outcome {
        if args.json {
            print(&json_line(&o)?)?;
        } else {
            print(&format!(
                "uploaded {} ({} bytes) to {}: HTTP {} after {} attempt(s); {}\n",
                args.profile, o.payload_bytes, o.url, o.status, o.attempts, o.response
            ))?;
        }
    }
    Ok(())
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
