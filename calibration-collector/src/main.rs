//! `calibration-collector`: estimate, check, probe, run, fit, upload.
//!
//! Exit codes: 0 ok; 1 bad input (the message names the file, line or
//! field); 2 no NVIDIA driver or GPU; 3 a GPU or measurement step failed;
//! 4 the upload failed; 130 interrupted (finished points are kept).

use anyhow::Result;
use calibration_collector::error::CollectorError;
use calibration_collector::{cases, check, estimate_cmd};
use clap::{Parser, Subcommand};
use std::io::Write;

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

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Estimate { spec, table, gpu } => {
            let text = estimate_cmd::run(&estimate_cmd::EstimateArgs { spec, table, gpu })?;
            print(&text)?;
        }
        Command::Check {
            files,
            family,
            filter,
            profile,
            json,
        } => {
            let profile = match profile {
                None => None,
                Some(path) => Some(load_runtime(&path)?),
            };
            let report = check::compare(&check::CheckArgs {
                files,
                family,
                filter,
                profile,
            })?;
            if json {
                print(&(serde_json::to_string_pretty(&report)? + "\n"))?;
            } else {
                print(&check::render(&report))?;
            }
        }
    }
    Ok(0)
}

fn load_runtime(path: &str) -> Result<headroom_core::RuntimeProfile> {
    let text = cases::read_text(path)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CollectorError::input(format!("{path}: malformed JSON: {e}")))?;
    let runtime = value.get("runtime").unwrap_or(&value);
    headroom_core::spec::parse_runtime(runtime)
        .map_err(|e| CollectorError::input(format!("{path}: {e}")).into())
}
