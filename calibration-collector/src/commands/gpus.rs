//! `headroom gpus`: which cards of the catalog run a spec, the
//! longest length and largest batch that fit each, the reservation a
//! scheduler should request, and for ESMFold the longest protein with and
//! without chunking and the chunk size that makes the spec's length fit.

use crate::cases::read_text;
use crate::error::{CollectorError, Result};
use crate::parallel_args::{self, ParallelArgs};
use headroom_core::arch::Architecture;
use headroom_core::gpus::CATALOG;
use headroom_core::parallel::Strategy;
use headroom_core::readers::Spec;
use headroom_core::search::{self, ChunkChoice, GpuFit};
use headroom_core::uncertainty::likely_range;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use headroom_core::{estimate, Bytes};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Options of `gpus` (its command-line flags).
#[derive(Clone, Debug, clap::Args)]
pub struct GpusArgs {
    /// Spec JSON file; `-` or nothing reads stdin.
    pub spec: Option<String>,
    /// Safety margin on top of the likely range's high end, in percent: a card fits
    /// when the high end plus this margin is within its usable memory, and the
    /// reservation is the high end plus this margin.
    #[arg(long = "margin", value_name = "MARGIN", default_value_t = 0)]
    pub margin_percent: u32,
    /// After the table, what would make the job fit: for the card named (e.g.
    /// `rtx-4090`), or with no value for every card it does not fit. Each
    /// suggestion is one change, an exact estimate on that card, ranked by how
    /// little it changes the job.
    #[arg(long, value_name = "GPU", num_args = 0..=1, default_missing_value = "")]
    pub advise: Option<String>,
    /// Several GPUs: override the spec's `workload.parallel` (the longest length and
    /// largest batch are per rank at this strategy and count).
    #[command(flatten)]
    pub parallel: ParallelArgs,
}

fn opt(v: Option<u32>) -> String {
    v.map_or_else(|| "-".into(), |n| n.to_string())
}

/// Runs `gpus`, returning the table to print.
pub fn run(args: &GpusArgs) -> Result<String> {
    if args.margin_percent > 1000 {
        return Err(CollectorError::input(format!(
            "--margin: {} is out of range; allowed: a percentage from 0 to 1000",
            args.margin_percent
        )));
    }
    let path = args.spec.as_deref().unwrap_or("-");
    let name = if path == "-" { "(stdin)" } else { path };
    let mut spec = Spec::from_json(&read_text(path)?)
        .map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    parallel_args::apply(&args.parallel, &mut spec)?;
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let peak = estimate(arch, w, rt).map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    let strategies = search::strategies_for(arch, w);
    let (fits, peaks) = std::thread::scope(|scope| {
        let peaks =
            scope.spawn(|| fewest_cards_peaks(arch, w, rt, &strategies, args.margin_percent));
        let fits = gpu_fits_in_parallel(arch, w, rt, args.margin_percent);
        let peaks = peaks
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (fits, peaks)
    });
    let fits = fits.map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    let peaks = peaks.map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
    // The reservation covers the likely range's high end on the measured
    // card (the runtime's, the H200's).
    let range = likely_range(arch, w, peak.driver_peak, peak.outside_allocator, true);
    let reservation =
        search::range_reservation(arch, w, rt, peak.driver_peak.0, args.margin_percent);
    let length = if arch.is_vision() { "image" } else { "seq_len" };
    let mut out = String::new();
    let ranks = parallel_args::per_rank(w).map_or_else(String::new, |r| format!(" {r}"));
    let _ = writeln!(
        out,
        "{} at batch {}{ranks}, {length} {}: driver peak {}, likely {} to {}; request {} (the high end, {}% margin)",
        spec.model.name,
        w.batch,
        w.length(arch.is_vision()),
        peak.driver_peak,
        range.low,
        range.high,
        Bytes(reservation),
        args.margin_percent
    );
    let _ = writeln!(
        out,
        "fits: the likely range's high end ({} measured {} {} case(s) were {:+.1}% to {:+.1}% off){} within the card's usable memory; cards other than the H200 and H100 also allow for their unmeasured overheads\n",
        range.band.cases,
        range.band.family,
        range.band.mode.key(),
        range.band.lowest * 100.0,
        range.band.highest * 100.0,
        if args.margin_percent > 0 {
            format!(" plus {}%", args.margin_percent)
        } else {
            String::new()
        }
    );
    let esmfold = fits.iter().any(|f| f.chunk_for_length.is_some());
    let _ = write!(
        out,
        "{:30} {:>11}{:>5} {:>5} {:>11} {:>9}",
        "gpu",
        "usable",
        "fits",
        "jobs",
        format!("max {length}"),
        "max batch"
    );
    if esmfold {
        let _ = write!(
            out,
            " {:>12} {:>12} {:>14}",
            "unchunked", "chunk 4", "chunk for len"
        );
    }
    for (strategy, _) in &peaks {
        let _ = write!(out, " {:>12}", format!("gpus {}", strategy.key()));
    }
    out.push('\n');
    for f in &fits {
        let _ = write!(
            out,
            "{:30} {:>11}{:>5} {:>5} {:>11} {:>9}",
            f.gpu.name,
            format!(
                "{}{}",
                Bytes(f.gpu.usable_bytes),
                if headroom_core::gpus::overheads_measured(f.gpu) {
                    "*"
                } else {
                    " "
                }
            ),
            if f.fits { "yes" } else { "no" },
            f.on_card().jobs(
                f.gpu.usable_bytes,
                f.on_card().reservation(f.gpu.usable_bytes, reservation)
            ),
            opt(f.max_length),
            opt(f.max_batch)
        );
        if esmfold {
            let chunk = match f.chunk_for_length {
                Some(ChunkChoice::Unchunked) => "none needed".to_string(),
                Some(ChunkChoice::Chunk(c)) => c.to_string(),
                Some(ChunkChoice::DoesNotFit) | None => "does not fit".to_string(),
            };
            let _ = write!(
                out,
                " {:>12} {:>12} {:>14}",
                opt(f.max_length_unchunked),
                opt(f.max_length_chunked),
                chunk
            );
        }
        for (strategy, p) in &peaks {
            let cap = search::strategy_capacity(f.gpu, arch, w, rt, *strategy, args.margin_percent);
            let fewest = search::fewest_cards_on_row(f.fits, w, p, cap);
            let _ = write!(out, " {:>12}", opt(fewest));
        }
        out.push('\n');
    }
    for (strategy, _) in &peaks {
        if let Some(why) = search::strategy_unavailable(arch, w, *strategy) {
            let _ = writeln!(
                out,
                "\ngpus {}: not for this model ({why}): the column says 1 where one card runs the job, else \"-\"",
                strategy.key()
            );
        }
    }
    if !peaks.is_empty() {
        let _ = write!(
            out,
            "\ngpus STRATEGY: the fewest cards of that row whose per-rank peak fits, batch {} per rank, {} at most (\"-\": none);",
            w.batch,
            search::GPU_COUNTS[search::GPU_COUNTS.len() - 1]
        );
        let _ = writeln!(
            out,
            " counts tried: {}",
            search::GPU_COUNTS.map(|c| c.to_string()).join(", ")
        );
        let fsdp2 = peaks.iter().any(|(s, _)| *s == Strategy::Fsdp2);
        if fsdp2 && w.training.precision.autocast() {
            let mut sharded = w.clone();
            search::fsdp2_mixed_precision(&mut sharded);
            let _ = writeln!(
                out,
                "gpus fsdp2: {} as the HF Trainer and accelerate apply it to FSDP2: fp32 sharded weights gathered in {}, gradients reduced in {}",
                w.training.precision.key(),
                sharded.parallel.param_dtype.key(),
                sharded.parallel.reduce_dtype.key()
            );
        }
    }
    let islands: Vec<String> = fits
        .iter()
        .flat_map(|f| {
            let length = f.length_runs_again_up_to.map(|top| {
                format!(
                    "{}: some {length}s above {} run again, up to {top}; not every one",
                    f.gpu.name,
                    opt(f.max_length)
                )
            });
            let batch = f.batch_runs_again_up_to.map(|top| {
                format!(
                    "{}: some batches above {} run again, up to {top}; not every one",
                    f.gpu.name,
                    opt(f.max_batch)
                )
            });
            length.into_iter().chain(batch)
        })
        .collect();
    // Lengths and batches that run only through PyTorch freeing its cache.
    let freeing: Vec<String> = fits
        .iter()
        .flat_map(|f| {
            // The axis' name, one and several ("batch", "batches").
            let line = |axis: (&str, &str), within: Option<u32>, longest: Option<u32>| {
                within.zip(longest).map(|(within, longest)| {
                    let from = within + 1;
                    let which = if from == longest {
                        format!("{} {longest} runs", axis.0)
                    } else {
                        format!("{} {from} to {longest} run", axis.1)
                    };
                    let without = if within == 0 {
                        "none runs without".to_string()
                    } else {
                        format!("every one up to {within} runs without")
                    };
                    format!(
                        "{}: {which} only if PyTorch frees its cache at the card's end ({without})",
                        f.gpu.name
                    )
                })
            };
            let lengths = format!("{length}s");
            line(
                (length, &lengths),
                f.length_without_freeing_cache,
                f.max_length,
            )
            .into_iter()
            .chain(line(
                ("batch", "batches"),
                f.batch_without_freeing_cache,
                f.max_batch,
            ))
            .collect::<Vec<_>>()
        })
        .collect();
    // The job as given, where it fits only through that release: its peak
    // on the card, the cache it gives back, and what to request instead of
    // the unlimited reservation.
    let released: Vec<String> = fits
        .iter()
        .filter_map(|f| {
            f.releasing_cache_at.map(|on_card| {
                format!(
                    "{}: runs within {} (the card less the likely range's allowance), freeing {} of cached blocks there; request the whole card ({}), not {}",
                    f.gpu.name,
                    Bytes(on_card),
                    Bytes(peak.driver_peak.0.saturating_sub(on_card)),
                    Bytes(f.gpu.usable_bytes),
                    Bytes(reservation)
                )
            })
        })
        .collect();
    if !released.is_empty() {
        let _ = writeln!(
            out,
            "\nthis job fits these cards only because PyTorch frees its cache and retries at the card's end:"
        );
        for line in &released {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(
        out,
        "\n*: the card's overheads outside the allocator (CUDA context, cuBLAS, kernels) were measured (the H200; the H100 gives the same figures); the other cards' are the H200's, and their fit allows for half of them either way"
    );
    let _ = writeln!(
        out,
        "max {length}, max batch: every value up to it runs (near the card's end, where PyTorch frees its cache and retries, the first that does not run, found by a scan)"
    );
    for line in &islands {
        let _ = writeln!(out, "  {line}");
    }
    if !freeing.is_empty() {
        let _ = writeln!(
            out,
            "near the card's end, where a job runs only because PyTorch frees its cache and retries (the replay follows PyTorch's release; on 28 points measured under smaller cards' limits it ran and failed where the GPU did, after one fix):"
        );
        for line in &freeing {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(card) = &args.advise {
        let cards: Vec<&'static headroom_core::gpus::Gpu> = if card.is_empty() {
            fits.iter().filter(|f| !f.fits).map(|f| f.gpu).collect()
        } else {
            vec![gpu_named("--advise", card)?]
        };
        for gpu in cards {
            let advice = crate::progress::while_working(
                &format!("looking for what makes it fit {}", gpu.name),
                || headroom_core::advice::advise(arch, w, rt, gpu, args.margin_percent),
            )
            .map_err(|e| CollectorError::input(format!("{name}: {e}")))?;
            let fits_already = fits.iter().any(|f| f.gpu.id == gpu.id && f.fits);
            out.push_str(&render_advice(gpu, fits_already, &advice));
        }
    }
    Ok(out)
}

/// One rank's peak at each GPU count tried ([`search::rank_peaks`]).
type RankPeaks = Vec<(u32, Option<u64>)>;

/// Per strategy of [`search::strategies_for`], one rank's peak at each GPU
/// count, searched until it fits the smallest card of the catalog.
fn fewest_cards_peaks(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    strategies: &[Strategy],
    margin_percent: u32,
) -> std::result::Result<Vec<(Strategy, RankPeaks)>, headroom_core::Error> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = strategies
            .iter()
            .map(|&s| {
                let smallest = CATALOG
                    .iter()
                    .map(|g| {
                        search::strategy_capacity(g, arch, workload, runtime, s, margin_percent)
                    })
                    .min()
                    .unwrap_or(0);
                scope.spawn(move || {
                    search::rank_peaks(arch, workload, runtime, s, smallest).map(|p| (s, p))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    })
}

/// [`search::gpu_fits`] with the cards spread over every core, and a
/// progress bar on a terminal (a long generation's rows take seconds each).
fn gpu_fits_in_parallel(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_percent: u32,
) -> std::result::Result<Vec<GpuFit>, headroom_core::Error> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(CATALOG.len());
    let bar = ProgressBar::new(CATALOG.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} cards [{elapsed} < {eta}]")
            .expect("template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let next = AtomicUsize::new(0);
    let mut rows: Vec<(usize, std::result::Result<GpuFit, headroom_core::Error>)> =
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(gpu) = CATALOG.get(i) else { break };
                            mine.push((
                                i,
                                search::gpu_fit(gpu, arch, workload, runtime, margin_percent),
                            ));
                            bar.inc(1);
                        }
                        mine
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| {
                    w.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
    bar.finish_and_clear();
    rows.sort_by_key(|(i, _)| *i);
    rows.into_iter().map(|(_, row)| row).collect()
}

/// The suggestions for one card, as the table's epilogue.
pub fn render_advice(
    gpu: &headroom_core::gpus::Gpu,
    fits_already: bool,
    advice: &[headroom_core::advice::Suggestion],
) -> String {
    let mut out = format!(
        "\nwhat would make it fit {} ({} usable):\n",
        gpu.name,
        Bytes(gpu.usable_bytes)
    );
    if fits_already {
        out.push_str("  it fits as it is\n");
    } else if advice.is_empty() {
        out.push_str("  no change tried makes it fit (allocator, optimizer kernel, attention, chunking, checkpointing, KV cache, bf16, LoRA, batch, length, more GPUs; for training, checkpointing with micro-batches, with LoRA, and with FSDP2 over up to 256 cards)\n");
    }
    for (i, s) in advice.iter().enumerate() {
        let _ = writeln!(
            out,
            "  {}. {:<58} peak {} per GPU; costs {}",
            i + 1,
            s.what,
            Bytes(s.driver_peak),
            s.change.cost()
        );
    }
    out
}

/// The catalog card a flag names, by id or by a name that leaves one card
/// (`h100`, `RTX 4090`); an error listing the cards it could mean, or all.
pub(crate) fn gpu_named(
    flag: &str,
    name: &str,
) -> Result<&'static headroom_core::gpus::Gpu, CollectorError> {
    headroom_core::gpus::find_by_name(name).map_err(|candidates| {
        if candidates.is_empty() {
            let known: Vec<&str> = CATALOG.iter().map(|g| g.id).collect();
            CollectorError::input(format!(
                "{flag}: unknown GPU `{name}`; allowed: {}",
                known.join(", ")
            ))
        } else {
            CollectorError::input(format!(
                "{flag}: `{name}` could be {}; name one",
                candidates.join(" or ")
            ))
        }
    })
}
