//! `calibrate`: the measurements that pin every runtime coefficient of a
//! card, in one go (a few minutes): `probe`, a `run` sweep that separates
//! what inference, a backward pass and cuDNN each hold outside the
//! allocator, and `fit --probe`. What it writes is what `upload` sends.

use crate::commands::{fit, probe, run};
use crate::error::{CollectorError, Result};
use std::path::PathBuf;

/// Options of `calibrate`.
#[derive(Clone, Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Folder for the probe report, the measurements and the profile (created; its files are never replaced).
    #[arg(long, default_value = "headroom-calibration")]
    pub out_dir: PathBuf,
    /// GPU (CUDA ordinal).
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Python interpreter for the built-in harness (needs torch, transformers, torchvision).
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Print the sweep's points and commands; run nothing (no GPU needed).
    #[arg(long)]
    pub dry_run: bool,
}

/// One sweep of the calibration: a preset, its workload, lengths, batches.
pub struct Sweep {
    /// What it pins.
    pub pins: &'static str,
    /// Preset id.
    pub model: &'static str,
    /// The `workload` JSON.
    pub workload: &'static str,
    /// Lengths (tokens, or the image edge).
    pub seq_lens: &'static [u32],
    /// Batches.
    pub batches: &'static [u32],
}

/// The sweep `calibrate` runs: small models, so that it takes minutes and
/// fits a 12 GB card. The fit separates three figures outside the
/// allocator (`fit`'s `y = inference + training * backward + cnn *
/// cudnn`): inference points, training points (autograd's cuBLAS handle
/// and backward kernels) and convolution points (cuDNN), each at two sizes
/// so that what grows with the job is not taken for an overhead.
pub const CALIBRATION_SWEEP: &[Sweep] = &[
    Sweep {
        pins: "inference (CUDA context, cuBLAS, kernels)",
        model: "llama-3.2-1b",
        workload: r#"{"mode":"inference","dtype":"bf16","attention":"sdpa","inference":{"kind":"generate","new_tokens":16}}"#,
        seq_lens: &[1024, 4096],
        batches: &[1],
    },
    Sweep {
        pins: "a backward pass (autograd's cuBLAS handle, backward kernels)",
        model: "gpt2",
        workload: r#"{"mode":"training","attention":"sdpa","training":{"optimizer":"adamw","steps":2,"precision":"amp_bf16"}}"#,
        seq_lens: &[512, 1024],
        batches: &[4],
    },
    Sweep {
        pins: "cuDNN (convolution library and workspaces)",
        model: "resnet-50",
        workload: r#"{"mode":"inference","dtype":"fp32"}"#,
        seq_lens: &[224],
        batches: &[16, 64],
    },
];

/// What `calibrate` did.
#[derive(Debug)]
pub struct CalibrateOutcome {
    /// The text to print.
    pub report: String,
}

fn sweep_args(args: &CalibrateArgs, sweep: &Sweep, out: PathBuf) -> run::RunArgs {
    run::RunArgs {
        model: Some(sweep.model.into()),
        workload: Some(sweep.workload.into()),
        seq_lens: sweep.seq_lens.to_vec(),
        batches: sweep.batches.to_vec(),
        python: args.python.clone(),
        out: Some(out),
        device: args.device,
        dry_run: args.dry_run,
        ..run::RunArgs::default()
    }
}

/// Runs the calibration (or, with `--dry-run`, shows it).
pub fn run(args: &CalibrateArgs) -> Result<CalibrateOutcome> {
    let probe_file = args.out_dir.join("probe.json");
    let measurements = args.out_dir.join("measurements.jsonl");
    let profile_file = args.out_dir.join("profile.json");
    let mut report = String::new();
    if args.dry_run {
        report.push_str(&format!(
            "calibrate: probe -> {}, {} sweep(s) -> {}, fit -> {}\n",
            probe_file.display(),
            CALIBRATION_SWEEP.len(),
            measurements.display(),
            profile_file.display()
        ));
        for sweep in CALIBRATION_SWEEP {
            report.push_str(&format!("## pins {}\n", sweep.pins));
            let (_, shown) = run::execute(&sweep_args(args, sweep, measurements.clone()))?;
            report.push_str(&shown.unwrap_or_default());
        }
        return Ok(CalibrateOutcome { report });
    }
    for file in [&probe_file, &measurements, &profile_file] {
        if file.exists() {
            return Err(CollectorError::input(format!(
                "{}: exists; calibrate never replaces a file: give another --out-dir",
                file.display()
            )));
        }
    }
    eprintln!("calibrate 1/3: probe");
    let probed = probe::run(&probe::ProbeArgs {
        device: Some(args.device),
        json: true,
        ..probe::ProbeArgs::default()
    })?;
    std::fs::create_dir_all(&args.out_dir).map_err(|e| CollectorError::write(&args.out_dir, e))?;
    let text =
        serde_json::to_string_pretty(&probed).map_err(|e| CollectorError::input(e.to_string()))?;
    std::fs::write(&probe_file, text + "\n").map_err(|e| CollectorError::write(&probe_file, e))?;
    for (i, sweep) in CALIBRATION_SWEEP.iter().enumerate() {
        eprintln!(
            "calibrate 2/3: sweep {}/{}: {} (pins {})",
            i + 1,
            CALIBRATION_SWEEP.len(),
            sweep.model,
            sweep.pins
        );
        let (outcome, _) = run::execute(&sweep_args(args, sweep, measurements.clone()))?;
        if outcome.interrupted {
            return Err(CollectorError::Interrupted(format!(
                "interrupted: the finished points are kept in {}",
                measurements.display()
            )));
        }
        report.push_str(&format!(
            "{}: {} point(s), ok {}, out of memory {}, failed {}\n",
            sweep.model, outcome.points, outcome.ok, outcome.oom, outcome.failed
        ));
    }
    eprintln!("calibrate 3/3: fit");
    let fitted = fit::run(&fit::FitArgs {
        files: vec![measurements.display().to_string()],
        probe: Some(probe_file.display().to_string()),
        out: Some(profile_file.clone()),
        ..fit::FitArgs::default()
    })?;
    let text = serde_json::to_string_pretty(&fitted.profile)
        .map_err(|e| CollectorError::input(e.to_string()))?;
    std::fs::write(&profile_file, text + "\n")
        .map_err(|e| CollectorError::write(&profile_file, e))?;
    report.push_str(&fitted.report);
    report.push_str(&format!(
        "\nprofile written to {}; share it with: headroom upload {} --to https://REGISTRY/api/v1/profiles\n",
        profile_file.display(),
        profile_file.display()
    ));
    Ok(CalibrateOutcome { report })
}
