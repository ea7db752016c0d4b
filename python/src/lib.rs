//! `headroom._headroom`: the core's answers for Python.
//!
//! Every function takes the spec as JSON text (the package's `headroom`
//! module turns a dict, a JSON string or a file into it) and returns JSON
//! text, which the Python side wraps in typed objects. The estimate's
//! document is the core's [`Report`], so it equals `headroom estimate`'s
//! output byte for byte. The long searches run with the interpreter's lock
//! released, spread over the machine's cores.
//!
//! Errors: a spec the core refuses raises `SpecError` (a `ValueError`)
//! with the core's message, which names the field; an unknown card raises
//! `ValueError` naming the argument.
#![forbid(unsafe_code)]

use headroom_core::advice::advise as core_advise;
use headroom_core::estimate::{estimate_with_timeline, EstimateOptions};
use headroom_core::gpus::{self, Gpu, CATALOG};
use headroom_core::parallel::Strategy;
use headroom_core::readers::Spec;
use headroom_core::report::Report;
use headroom_core::search::{self, ChunkChoice, GpuFit};
use headroom_core::{estimate as core_estimate, Error};
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{json, Value};

create_exception!(
    _headroom,
    SpecError,
    PyValueError,
    "A spec the model refuses; the message names the field and what it accepts."
);

/// The core's error as `SpecError`, with its message as the CLI prints it.
fn spec_error(e: Error) -> PyErr {
    SpecError::new_err(e.to_string())
}

fn parse(spec_json: &str) -> PyResult<Spec> {
    Spec::from_json(spec_json).map_err(spec_error)
}

/// The catalog card `name` names (an id such as `rtx-4090`, or a name that
/// leaves one card, such as `H100`), else a `ValueError` naming `field`
/// and the cards it could mean.
fn gpu_named(field: &str, name: &str) -> PyResult<&'static Gpu> {
    gpus::find_by_name(name).map_err(|candidates| {
        if candidates.is_empty() {
            let known: Vec<&str> = CATALOG.iter().map(|g| g.id).collect();
            PyValueError::new_err(format!(
                "{field}: unknown GPU `{name}`; allowed: {}",
                known.join(", ")
            ))
        } else {
            PyValueError::new_err(format!(
                "{field}: `{name}` could be {}; name one",
                candidates.join(" or ")
            ))
        }
    })
}

fn optional_gpu(field: &str, name: Option<&str>) -> PyResult<Option<&'static Gpu>> {
    name.map(|n| gpu_named(field, n)).transpose()
}

fn margin_checked(margin_percent: u32) -> PyResult<u32> {
    if margin_percent > 1000 {
        return Err(PyValueError::new_err(format!(
            "margin_percent: {margin_percent} is out of range; allowed: a percentage from 0 to 1000"
        )));
    }
    Ok(margin_percent)
}

fn card_json(gpu: &Gpu) -> Value {
    json!({
        "id": gpu.id,
        "name": gpu.name,
        "architecture": gpu.architecture,
        "total_bytes": gpu.total_bytes,
        "nvml_total_bytes": gpu.nvml_total_bytes,
        "usable_bytes": gpu.usable_bytes,
        "overheads_measured": gpus::overheads_measured(gpu),
    })
}

/// The estimate's document, exactly as `headroom estimate [--gpu GPU]`
/// prints it (pretty JSON and a newline).
#[pyfunction]
#[pyo3(signature = (spec_json, gpu=None))]
fn estimate(py: Python<'_>, spec_json: &str, gpu: Option<&str>) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let gpu = optional_gpu("gpu", gpu)?;
    let report = py.detach(|| Report::of(&spec, gpu)).map_err(spec_error)?;
    Ok(report.to_json_text(&spec))
}

/// Whether the job fits `gpu` by the `gpus` table's rule (its replay
/// within the card's usable memory less the likely range's allowance and
/// `margin_percent`), the reservation to request (the likely range's high
/// end plus the margin, in whole MiB; the whole card where it fits only by
/// PyTorch freeing its cache at the card's end, with its peak there) and
/// how many such jobs run on the card at once (the table's and the page's
/// "jobs per card"): `search::OnCard`, one rule with them.
#[pyfunction]
#[pyo3(signature = (spec_json, gpu, margin_percent=0))]
fn card_fit(py: Python<'_>, spec_json: &str, gpu: &str, margin_percent: u32) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let gpu = gpu_named("gpu", gpu)?;
    let margin = margin_checked(margin_percent)?;
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let (on_card, reservation) = py
        .detach(|| -> Result<(search::OnCard, u64), Error> {
            let peak = core_estimate(arch, w, rt)?;
            let capacity = search::decision_capacity(gpu, arch, w, rt, margin);
            let on_card = search::on_card(arch, w, rt, capacity)?;
            let range = search::range_reservation(arch, w, rt, peak.driver_peak.0, margin);
            Ok((on_card, on_card.reservation(gpu.usable_bytes, range)))
        })
        .map_err(spec_error)?;
    let value = json!({
        "gpu": card_json(gpu),
        "margin_percent": margin,
        "fits": on_card.fits,
        "releasing_cache_at_bytes": on_card.releasing_cache_at,
        "reservation_bytes": reservation,
        "jobs": on_card.jobs(gpu.usable_bytes, reservation),
    });
    Ok(value.to_string())
}

/// Runs `job` on each card of the catalog, spread over the machine's cores,
/// and returns the answers in the catalog's order.
fn per_card<T: Send>(job: impl Fn(&'static Gpu) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, CATALOG.len());
    let mut rows: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|first| {
                let job = &job;
                scope.spawn(move || {
                    (first..CATALOG.len())
                        .step_by(threads)
                        .map(|i| (i, job(&CATALOG[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    rows.sort_by_key(|(i, _)| *i);
    rows.into_iter().map(|(_, row)| row).collect()
}

fn chunk_json(choice: Option<ChunkChoice>) -> Value {
    match choice {
        None => Value::Null,
        Some(ChunkChoice::Unchunked) => json!("none needed"),
        Some(ChunkChoice::Chunk(c)) => json!(c),
        Some(ChunkChoice::DoesNotFit) => json!("does not fit"),
    }
}

/// Every card of the catalog with the job as `headroom gpus` decides it:
/// whether it fits, the jobs per card, the longest length and largest
/// batch that fit, ESMFold's chunking columns, and the fewest cards with
/// each strategy that can spread the job.
#[pyfunction]
#[pyo3(name = "gpus", signature = (spec_json, margin_percent=0))]
fn gpu_table(py: Python<'_>, spec_json: &str, margin_percent: u32) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let margin = margin_checked(margin_percent)?;
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let (peak, fits, peaks) = py
        .detach(|| -> Result<_, Error> {
            let peak = core_estimate(arch, w, rt)?;
            let strategies = search::strategies_for(arch, w);
            let peaks = strategies
                .iter()
                .map(|&s| {
                    let smallest = CATALOG
                        .iter()
                        .map(|g| search::strategy_capacity(g, arch, w, rt, s, margin))
                        .min()
                        .unwrap_or(0);
                    search::rank_peaks(arch, w, rt, s, smallest).map(|p| (s, p))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let fits = per_card(|gpu| search::gpu_fit(gpu, arch, w, rt, margin))
                .into_iter()
                .collect::<Result<Vec<GpuFit>, _>>()?;
            Ok((peak, fits, peaks))
        })
        .map_err(spec_error)?;
    let range = headroom_core::uncertainty::likely_range(
        arch,
        w,
        peak.driver_peak,
        peak.outside_allocator,
        true,
    );
    let reservation = search::range_reservation(arch, w, rt, peak.driver_peak.0, margin);
    let cards: Vec<Value> = fits
        .iter()
        .map(|f| {
            let fewest: serde_json::Map<String, Value> = peaks
                .iter()
                .map(|(strategy, p)| {
                    let cap = search::strategy_capacity(f.gpu, arch, w, rt, *strategy, margin);
                    (
                        strategy.key().to_string(),
                        json!(search::fewest_cards_on_row(f.fits, w, p, cap)),
                    )
                })
                .collect();
            json!({
                "gpu": card_json(f.gpu),
                "fits": f.fits,
                "jobs": search::jobs_on_card(f.fits, f.gpu.usable_bytes, reservation),
                "max_length": f.max_length,
                "max_batch": f.max_batch,
                "length_runs_again_up_to": f.length_runs_again_up_to,
                "batch_runs_again_up_to": f.batch_runs_again_up_to,
                "length_without_freeing_cache": f.length_without_freeing_cache,
                "batch_without_freeing_cache": f.batch_without_freeing_cache,
                "max_length_unchunked": f.max_length_unchunked,
                "max_length_chunked": f.max_length_chunked,
                "chunk_for_length": chunk_json(f.chunk_for_length),
                "fewest_gpus": fewest,
            })
        })
        .collect();
    let unavailable: serde_json::Map<String, Value> = peaks
        .iter()
        .filter_map(|(s, _)| {
            search::strategy_unavailable(arch, w, *s).map(|why| (s.key().to_string(), json!(why)))
        })
        .collect();
    let value = json!({
        "driver_peak": peak.driver_peak.0,
        "likely_range": headroom_core::report::range_json(&range),
        "reservation_bytes": reservation,
        "margin_percent": margin,
        "length_axis": if arch.is_vision() { "image" } else { "seq_len" },
        "strategies": peaks.iter().map(|(s, _)| s.key()).collect::<Vec<_>>(),
        "strategies_unavailable": unavailable,
        "single_gpu": w.parallel.strategy == Strategy::None,
        "cards": cards,
    });
    Ok(value.to_string())
}

/// What would make the job fit `gpu`, best first, as `headroom gpus
/// --advise GPU` lists it: each suggestion a single change (or a
/// combination), its words, its per-GPU peak on the card, its cost, and
/// the changed workload and runtime as spec JSON.
#[pyfunction]
#[pyo3(signature = (spec_json, gpu, margin_percent=0))]
fn advise(py: Python<'_>, spec_json: &str, gpu: &str, margin_percent: u32) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let gpu = gpu_named("gpu", gpu)?;
    let margin = margin_checked(margin_percent)?;
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let (fits_already, suggestions) = py
        .detach(|| -> Result<_, Error> {
            let capacity = search::decision_capacity(gpu, arch, w, rt, margin);
            let fits = search::fits(arch, w, rt, capacity)?;
            Ok((fits, core_advise(arch, w, rt, gpu, margin)?))
        })
        .map_err(spec_error)?;
    let suggestions: Vec<Value> = suggestions
        .iter()
        .map(|s| {
            json!({
                "what": s.what,
                "driver_peak": s.driver_peak,
                "cost": s.change.cost(),
                "workload": s.workload,
                "runtime": s.runtime,
            })
        })
        .collect();
    let value = json!({
        "gpu": card_json(gpu),
        "margin_percent": margin,
        "fits_already": fits_already,
        "suggestions": suggestions,
    });
    Ok(value.to_string())
}

/// The job's memory over time as `headroom estimate --timeline FILE.csv`
/// writes it: at most 1,024 rows of allocated, reserved and driver-level
/// bytes with their phase, step, layer and op.
#[pyfunction]
#[pyo3(signature = (spec_json, gpu=None))]
fn timeline(py: Python<'_>, spec_json: &str, gpu: Option<&str>) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let gpu = optional_gpu("gpu", gpu)?;
    py.detach(|| -> Result<String, Error> {
        let report = Report::of(&spec, gpu)?;
        let (est, timeline) = estimate_with_timeline(
            &spec.model.arch,
            &spec.workload,
            &spec.runtime,
            EstimateOptions {
                capacity: report.capacity(),
                ..EstimateOptions::default()
            },
        )?;
        Ok(timeline.csv(est.outside_allocator.0))
    })
    .map_err(spec_error)
}

/// The GPU catalog: every card's id, name, architecture, memory (total,
/// as NVML reports it, usable by a process) and whether its overheads
/// were measured.
#[pyfunction]
fn catalog() -> String {
    Value::Array(CATALOG.iter().map(card_json).collect()).to_string()
}

/// The catalog card a name means (`rtx-4090`, `H100`), as `catalog()`'s
/// entries are.
#[pyfunction]
fn find_gpu(name: &str) -> PyResult<String> {
    Ok(card_json(gpu_named("gpu", name)?).to_string())
}

/// The validated spec as the core reads it: its model (id, name, family)
/// and its inputs (workload and runtime with every default filled in).
#[pyfunction]
fn read_spec(spec_json: &str) -> PyResult<String> {
    let spec = parse(spec_json)?;
    let value = json!({
        "model": {
            "id": spec.model.id,
            "name": spec.model.name,
            "family": spec.model.arch.family(),
        },
        "inputs": {"workload": spec.workload, "runtime": spec.runtime},
    });
    Ok(value.to_string())
}

/// The extension module.
#[pymodule]
fn _headroom(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SpecError", m.py().get_type::<SpecError>())?;
    m.add_function(wrap_pyfunction!(estimate, m)?)?;
    m.add_function(wrap_pyfunction!(card_fit, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_table, m)?)?;
    m.add_function(wrap_pyfunction!(advise, m)?)?;
    m.add_function(wrap_pyfunction!(timeline, m)?)?;
    m.add_function(wrap_pyfunction!(catalog, m)?)?;
    m.add_function(wrap_pyfunction!(find_gpu, m)?)?;
    m.add_function(wrap_pyfunction!(read_spec, m)?)?;
    Ok(())
}
