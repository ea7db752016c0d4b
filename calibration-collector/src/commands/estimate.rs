//! `headroom estimate`: one spec in, the estimate out.

use crate::cases::read_text;
use crate::error::{CollectorError, Result};
use crate::parallel_args::{self, ParallelArgs};
use headroom_core::arch::{Architecture, Dtype};
use headroom_core::bytes::group_digits;
use headroom_core::estimate::{
    estimate_in_process, estimate_with, EarlierJob, Estimate, EstimateOptions,
};
use headroom_core::readers::Spec;
use headroom_core::report::Report;
use headroom_core::uncertainty::LikelyRange;
use headroom_core::workload::{InferenceKind, Logits, Mode, Optimizer, Precision};
use headroom_core::{gpus, Bytes};
use std::fmt::Write as _;

/// Options of `estimate` (its command-line flags).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct EstimateArgs {
    /// Spec JSON file; `-` or nothing reads stdin. A measurement case works unchanged.
    pub spec: Option<String>,
    /// Print a readable table instead of JSON.
    #[arg(long)]
    pub table: bool,
    /// Also say whether the job fits this GPU of the catalog (e.g. `h200`).
    #[arg(long)]
    pub gpu: Option<String>,
    /// A spec that ran earlier in the same process; repeat for several, oldest first (the
    /// first is the process's first job, as in a notebook). After a job of the same model its
    /// weights, optimizer state and workspaces stay where it put them (weights of another
    /// dtype cast in place, `model.half()`); after another model's job that model was dropped
    /// (`del model; gc.collect(); torch.cuda.empty_cache()`) and only the process's cuBLAS
    /// workspaces stay, in the segments they were created in.
    #[arg(long, value_name = "EARLIER_SPEC")]
    pub after: Vec<String>,
    /// Several GPUs: override the spec's `workload.parallel`.
    #[command(flatten)]
    pub parallel: ParallelArgs,
    /// Also write the job's memory over time to this CSV file: allocated, reserved
    /// and driver-level bytes over the job's allocations and frees, at most 1,024
    /// rows, each the highest of its run of events (the highest row is the peak),
    /// with its phase, step, layer and op.
    #[arg(long, value_name = "FILE.csv")]
    pub timeline: Option<std::path::PathBuf>,
    /// Replace the --timeline file if it exists (without it, an existing file is refused).
    #[arg(long, requires = "timeline")]
    pub force: bool,
}

/// Runs `estimate`, returning what to print.
pub fn run(args: &EstimateArgs) -> Result<String> {
    let path = args.spec.as_deref().unwrap_or("-");
    if let Some(timeline) = &args.timeline {
        // Before any work: never replace a file (the spec itself, say)
        // that the user did not say to replace.
        if timeline.exists() && !args.force {
            return Err(CollectorError::input(format!(
                "--timeline: {} exists; pass --force to replace it, or name a new file",
                timeline.display()
            )));
        }
    }
    let name = if path == "-" { "(stdin)" } else { path };
    let text = read_text(path)?;
    let mut spec =
        Spec::from_json(&text).map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    parallel_args::apply(&args.parallel, &mut spec)?;
    let gpu = match &args.gpu {
        None => None,
        Some(id) => Some(crate::commands::gpus::gpu_named("--gpu", id)?),
    };
    let options = EstimateOptions::default();
    let mut earlier = Vec::with_capacity(args.after.len());
    for path in &args.after {
        let spec = Spec::from_json(&read_text(path)?)
            .map_err(|e| CollectorError::input(format!("--after {path}: {e}")))?;
        earlier.push(spec);
    }
    let compute = |options: EstimateOptions| -> Result<Estimate> {
        if earlier.is_empty() {
            return estimate_with(&spec.model.arch, &spec.workload, &spec.runtime, options)
                .map_err(|e| CollectorError::input(format!("{name}: {e}")));
        }
        let jobs: Vec<EarlierJob> = earlier
            .iter()
            .map(|s| EarlierJob {
                arch: &s.model.arch,
                workload: &s.workload,
            })
            .collect();
        estimate_in_process(
            &jobs,
            &spec.model.arch,
            &spec.workload,
            &spec.runtime,
            options,
        )
        .map_err(|e| CollectorError::input(format!("{name} after {}: {e}", args.after.join(", "))))
    };
    let report = Report::new(&spec, gpu, |capacity| {
        let what = if gpu.is_none() && capacity.is_some() {
            "estimating: replaying on the largest card"
        } else {
            "estimating: replaying the job"
        };
        crate::progress::while_working(what, || {
            compute(EstimateOptions {
                capacity,
                ..options
            })
        })
    })?;
    let est = &report.estimate;
    if let Some(path) = &args.timeline {
        if !args.after.is_empty() {
            return Err(CollectorError::input(
                "--timeline: not with --after; allowed: the timeline of one job in a fresh process",
            ));
        }
        let (on_timeline, timeline) = headroom_core::estimate::estimate_with_timeline(
            &spec.model.arch,
            &spec.workload,
            &spec.runtime,
            EstimateOptions {
                capacity: report.capacity(),
                ..options
            },
        )
        .map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
        debug_assert_eq!(on_timeline.driver_peak, est.driver_peak);
        let csv = timeline.csv(on_timeline.outside_allocator.0);
        let mut file = if args.force {
            std::fs::File::create(path)
        } else {
            // Created here, so a file that appeared meanwhile is not replaced.
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
        }
        .map_err(|e| CollectorError::write(path, e))?;
        std::io::Write::write_all(&mut file, csv.as_bytes())
            .map_err(|e| CollectorError::write(path, e))?;
    }
    let range = &report.range;
    if args.table {
        let mut text = table(&spec, est, gpu);
        let _ = writeln!(text, "likely    {}", describe_range(range));
        if let Some(g) = gpu.filter(|g| est.fits && range.high.0 > g.usable_bytes) {
            let _ = writeln!(
                text,
                "note      it may not fit: the likely range's high end ({:.2} GB) is above the {:.2} GB usable on {}",
                range.high.as_gb(),
                Bytes(g.usable_bytes).as_gb(),
                g.name
            );
        }
        if let Some(no_card) = &report.no_card {
            let _ = writeln!(text, "note      {}", no_card.note());
        }
        Ok(text)
    } else {
        Ok(report.to_json_text(&spec))
    }
}

fn describe_workload(spec: &Spec) -> String {
    let w = &spec.workload;
    let mut s = String::new();
    let arch = &spec.model.arch;
    match (w.mode, arch) {
        (Mode::Inference, Architecture::EsmFold(fold)) => {
            let chunk = w
                .esmfold
                .chunk_size
                .map_or_else(|| "unchunked".to_string(), |c| format!("chunk {c}"));
            let recycles = headroom_core::families::esmfold::passes(fold, w) - 1;
            let _ = write!(
                s,
                "inference, fold ({chunk}, {recycles} recycle(s), {} stem)",
                w.esmfold.stem_dtype.key()
            );
        }
        (Mode::Inference, Architecture::Decoder(_))
            if w.inference.kind == InferenceKind::Generate =>
        {
            let cache = if w.inference.kv_cache {
                format!(
                    "KV cache {}",
                    w.inference
                        .kv_dtype
                        .unwrap_or(if w.dtype.is_float() {
                            w.dtype
                        } else {
                            Dtype::Bf16
                        })
                        .key()
                )
            } else {
                "no KV cache".to_string()
            };
            let _ = write!(
                s,
                "inference, generate ({} new tokens, {cache})",
                w.inference.new_tokens
            );
        }
        (Mode::Inference, Architecture::Decoder(_) | Architecture::Encoder(_)) => {
            let logits = match w.inference.logits {
                Logits::All => "logits for every position",
                Logits::Last => "logits for the last position",
                Logits::None => "hidden states, no head",
            };
            let _ = write!(s, "inference, forward ({logits})");
        }
        (Mode::Inference, _) => {
            let _ = write!(s, "inference, forward");
        }
        (Mode::Training, _) => {
            let _ = write!(
                s,
                "training, {}, {}, {} step(s)",
                optimizer_name(w.training.optimizer),
                precision_name(w.training.precision),
                w.training.steps
            );
            if w.training.grad_checkpointing {
                let _ = write!(s, ", gradient checkpointing");
            }
            if let Some(lora) = &w.training.lora {
                let _ = write!(s, ", LoRA rank {}", lora.rank);
            }
        }
    }
    let _ = write!(s, ", batch {}", w.batch);
    if let Some(ranks) = parallel_args::per_rank(w) {
        let _ = write!(s, " {ranks}");
    }
    if arch.is_vision() {
        let _ = write!(s, ", image {} px", w.length(true));
    } else {
        let _ = write!(s, ", seq_len {}", w.seq_len);
    }
    if w.mode == Mode::Inference && !matches!(arch, Architecture::EsmFold(_)) {
        let _ = write!(s, ", {}", w.dtype.key());
    }
    if matches!(arch, Architecture::Decoder(_) | Architecture::Encoder(_)) {
        let _ = write!(s, ", {} attention", w.attention.key());
    }
    s
}

/// The table's words for an optimizer (its key is `Optimizer::key`).
fn optimizer_name(o: Optimizer) -> &'static str {
    match o {
        Optimizer::Adamw => "AdamW",
        Optimizer::Sgd => "plain SGD (no momentum)",
        Optimizer::SgdMomentum => "SGD with momentum",
        Optimizer::Adafactor => "Adafactor",
        Optimizer::Adamw8bit => "8-bit AdamW (bitsandbytes)",
        Optimizer::PagedAdamw8bit => "paged 8-bit AdamW (bitsandbytes)",
        Optimizer::PagedAdamw32bit => "paged 32-bit AdamW (bitsandbytes)",
    }
}

/// The table's words for a precision (its key is `Precision::key`).
fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::AmpBf16 => "amp_bf16 (fp32 master weights)",
        Precision::AmpFp16 => "amp_fp16 (fp32 master weights, loss scaling)",
        Precision::Bf16 => "pure bf16",
        Precision::Fp16 => "pure fp16",
        Precision::Fp32 => "fp32",
    }
}

/// The readable table.
pub fn table(spec: &Spec, est: &Estimate, gpu: Option<&gpus::Gpu>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "model     {} ({}, {} family, {} params)",
        spec.model.name,
        spec.model.id,
        spec.model.arch.family(),
        group_digits(est.params)
    );
    let _ = writeln!(out, "workload  {}", describe_workload(spec));
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<28} {:>18} {:>10}", "component", "bytes", "GB");
    for share in &est.breakdown {
        let _ = writeln!(
            out,
            "{:<28} {:>18} {:>10.3}",
            share.component.label(),
            group_digits(share.bytes.0),
            share.bytes.as_gb()
        );
    }
    let _ = writeln!(out, "{}", "-".repeat(58));
    let rows: [(&str, Bytes); 4] = [
        ("driver peak (nvidia-smi)", est.driver_peak),
        ("reserved peak (torch)", est.reserved_peak),
        ("allocated peak (torch)", est.allocated_peak),
        ("outside torch's allocator", est.outside_allocator),
    ];
    for (label, bytes) in rows {
        let _ = writeln!(
            out,
            "{:<28} {:>18} {:>10.3}",
            label,
            group_digits(bytes.0),
            bytes.as_gb()
        );
    }
    let nccl = parallel_args::nccl_bytes(&spec.model.arch, &spec.workload, &spec.runtime);
    if nccl > 0 {
        let _ = writeln!(
            out,
            "NCCL      {} bytes ({:.3} GB) of communicator and peer buffers, outside torch's allocator: in \"{}\" and the outside sum",
            group_digits(nccl),
            Bytes(nccl).as_gb(),
            headroom_core::Component::Libraries.label()
        );
    }
    let _ = writeln!(out, "peak op   {}", est.peak_op);
    if let Some(g) = gpu {
        let _ = writeln!(
            out,
            "{}  {} ({:.2} GB usable)",
            if est.fits {
                "fits     "
            } else {
                "DOES NOT FIT"
            },
            g.name,
            Bytes(g.usable_bytes).as_gb()
        );
    }
    out
}

/// The likely range in words: the bytes, and where it comes from.
pub fn describe_range(range: &LikelyRange) -> String {
    let band = &range.band;
    if let Some(note) = headroom_core::uncertainty::unmeasured_note(band) {
        let mut text = format!(
            "{:.2} to {:.2} GB, wide: {note}",
            range.low.as_gb(),
            range.high.as_gb()
        );
        if !range.card_measured {
            text.push_str("; wider still: this card's own overheads were not measured");
        }
        return text;
    }
    let mut text = format!(
        "{:.2} to {:.2} GB: the errors of {} measured {} {} case(s){} were {:+.1}% to {:+.1}%",
        range.low.as_gb(),
        range.high.as_gb(),
        band.cases,
        band.family,
        band.mode.key(),
        if band.strategy == headroom_core::parallel::Strategy::None {
            String::new()
        } else {
            format!(" ({})", band.strategy.key())
        },
        band.lowest * 100.0,
        band.highest * 100.0
    );
    if !range.card_measured {
        text.push_str("; wider: this card's own overheads were not measured (only the H200's and the H100's are)");
    }
    text
}
