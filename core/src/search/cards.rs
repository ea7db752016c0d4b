//! A card's answer for a job: the capacity it is decided within, the job
//! as given on it, the reservation, jobs per card, and the catalog's rows.

use super::*;
use crate::arch::Architecture;
use crate::error::Error;
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::workload::Workload;
use alloc::vec::Vec;

/// The job as given on one card, within `capacity` (the card's
/// [`decision_capacity`]): whether it fits and, where it fits only because
/// PyTorch frees its cache and retries at the card's end, the driver-level
/// peak it reaches there. One rule for the command line, the page and
/// Python.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnCard {
    /// Every request was served (the cache freed and retried where needed).
    pub fits: bool,
    /// `Some(peak on the card)` when it fits only by freeing the cache at
    /// the card's end: on a larger card it would hold its unlimited peak
    /// less this in cache.
    pub releasing_cache_at: Option<u64>,
}

impl OnCard {
    /// What to request per job on a card of `usable` bytes: the likely
    /// range's reservation ([`range_reservation`]); a job that fits only by
    /// freeing its cache takes the whole card: PyTorch grows its cache to
    /// the card's end before it frees any, so its unlimited reservation
    /// overstates the card and anything less than the card understates it.
    pub fn reservation(&self, usable: u64, range_reservation: u64) -> u64 {
        match self.releasing_cache_at {
            Some(_) => usable,
            None => range_reservation,
        }
    }

    /// Jobs side by side on a card of `usable` bytes ([`jobs_on_card`]).
    pub fn jobs(&self, usable: u64, reservation: u64) -> u64 {
        jobs_on_card(self.fits, usable, reservation)
    }
}

/// [`OnCard`] for the job as given, one replay under `capacity`.
pub fn on_card(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<OnCard, Error> {
    let p = probe(arch, workload, runtime, capacity)?;
    Ok(OnCard {
        fits: p.fits,
        releasing_cache_at: (p.fits && !p.within_capacity).then_some(p.peak_on_card),
    })
}

/// Chunk sizes tried for ESMFold's triangular attention, fastest first (the
/// documented options are 128, 64 and 32; ColabFold uses 64 above 700 residues).
pub const ESMFOLD_CHUNK_SIZES: [u32; 7] = [256, 128, 64, 32, 16, 8, 4];

/// How an ESMFold job can fit a card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkChoice {
    /// Fits without chunking.
    Unchunked,
    /// Fits with this chunk size (the largest of [`ESMFOLD_CHUNK_SIZES`] that does).
    Chunk(u32),
    /// Does not fit even at the smallest chunk size.
    DoesNotFit,
}

/// The fastest chunking that makes `workload` (at its own length) fit in
/// `capacity` bytes: unchunked if that fits, else the largest chunk size that
/// does. Only meaningful for ESMFold; other families answer unchunked or not.
pub fn esmfold_chunk_that_fits(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<ChunkChoice, Error> {
    let mut w = workload.clone();
    w.esmfold.chunk_size = None;
    if fits(arch, &w, runtime, capacity)? {
        return Ok(ChunkChoice::Unchunked);
    }
    if !matches!(arch, Architecture::EsmFold(_)) {
        return Ok(ChunkChoice::DoesNotFit);
    }
    for chunk in ESMFOLD_CHUNK_SIZES {
        w.esmfold.chunk_size = Some(chunk);
        if fits(arch, &w, runtime, capacity)? {
            return Ok(ChunkChoice::Chunk(chunk));
        }
    }
    Ok(ChunkChoice::DoesNotFit)
}

/// What fits on one GPU of the catalog.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuFit {
    /// The card.
    pub gpu: &'static crate::gpus::Gpu,
    /// The workload as given fits.
    pub fits: bool,
    /// It fits only by PyTorch freeing its cache at the card's end, with
    /// this driver-level peak there ([`OnCard::releasing_cache_at`]).
    pub releasing_cache_at: Option<u64>,
    /// Longest sequence (or largest image) at the workload's batch.
    pub max_length: Option<u32>,
    /// Largest batch at the workload's length.
    pub max_batch: Option<u32>,
    /// Above `max_length`, a longer length found to run again (the top of
    /// an island: lengths between do not all run).
    pub length_runs_again_up_to: Option<u32>,
    /// Above `max_batch`, a larger batch found to run again.
    pub batch_runs_again_up_to: Option<u32>,
    /// Below `max_length`, the longest length that runs without PyTorch
    /// freeing its cache at the card's end, when shorter
    /// ([`Boundary::within_capacity_up_to`]).
    pub length_without_freeing_cache: Option<u32>,
    /// The same for `max_batch`.
    pub batch_without_freeing_cache: Option<u32>,
    /// ESMFold: longest sequence without chunking.
    pub max_length_unchunked: Option<u32>,
    /// ESMFold: longest sequence at the smallest chunk size tried.
    pub max_length_chunked: Option<u32>,
    /// ESMFold: the chunking that makes the workload's length fit.
    pub chunk_for_length: Option<ChunkChoice>,
}

impl GpuFit {
    /// The job as given on this card ([`OnCard`]).
    pub fn on_card(&self) -> OnCard {
        OnCard {
            fits: self.fits,
            releasing_cache_at: self.releasing_cache_at,
        }
    }
}

/// The bytes of `gpu` a predicted driver-level peak may reach and still be
/// said to fit: the card's usable memory with the likely range's upper end
/// taken in ([`crate::uncertainty`]: the lowest error measured for jobs of
/// this family, mode and strategy, and on a card whose overheads were not
/// measured half the outside-allocator bytes) and `margin_percent` set
/// aside. A prediction `p` fits when `p / (1 + lowest) + widening` (the
/// range's high end) times `1 + margin` is within the usable bytes.
pub fn decision_capacity(
    gpu: &crate::gpus::Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_percent: u32,
) -> u64 {
    use crate::uncertainty::{band_for, MIN_ERROR, UNMEASURED_CARD_OUTSIDE_SHARE};
    let usable = gpu.usable_bytes as f64 * 100.0 / (100.0 + f64::from(margin_percent));
    let widening = if is_measured_card(gpu) {
        0.0
    } else {
        let libraries = crate::families::libraries(arch, workload, runtime);
        crate::runtime::outside_allocator(runtime, libraries) as f64 * UNMEASURED_CARD_OUTSIDE_SHARE
    };
    let lowest = band_for(arch, workload).lowest.clamp(-0.99, -MIN_ERROR);
    ((usable - widening).max(0.0) * (1.0 + lowest)) as u64
}

/// [`decision_capacity`] for one rank of the job spread with `strategy`
/// (the strategy's likely range: the job on two cards), for the fewest
/// cards a job needs.
pub fn strategy_capacity(
    gpu: &crate::gpus::Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    strategy: Strategy,
    margin_percent: u32,
) -> u64 {
    let spread = on_gpus(workload, strategy, 2);
    decision_capacity(gpu, arch, &spread, runtime, margin_percent)
}

/// The reservation to request for a job whose prediction is
/// `driver_peak`: the likely range's high end (on the measured card) plus
/// `margin_percent`, rounded up to a whole MiB ([`reservation`]).
pub fn range_reservation(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: u64,
    margin_percent: u32,
) -> u64 {
    let libraries = crate::families::libraries(arch, workload, runtime);
    let outside = crate::runtime::outside_allocator(runtime, libraries);
    let range = crate::uncertainty::likely_range(
        arch,
        workload,
        crate::bytes::Bytes(driver_peak),
        crate::bytes::Bytes(outside),
        true,
    );
    reservation(range.high.0, margin_percent)
}

/// Whether `gpu`'s overheads were measured ([`crate::gpus::overheads_measured`]).
pub fn is_measured_card(gpu: &crate::gpus::Gpu) -> bool {
    crate::gpus::overheads_measured(gpu)
}

/// For every GPU of the catalog: whether the workload fits, the longest
/// length and largest batch that do, and for ESMFold the longest sequence
/// with and without chunking and the chunk size that makes this length fit.
pub fn gpu_fits(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_percent: u32,
) -> Result<Vec<GpuFit>, Error> {
    crate::gpus::CATALOG
        .iter()
        .map(|gpu| gpu_fit(gpu, arch, workload, runtime, margin_percent))
        .collect()
}

/// One card's row of [`gpu_fits`], decided within
/// [`decision_capacity`].
pub fn gpu_fit(
    gpu: &'static crate::gpus::Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_percent: u32,
) -> Result<GpuFit, Error> {
    let capacity = decision_capacity(gpu, arch, workload, runtime, margin_percent);
    let (unchunked, chunked, chunk) = if matches!(arch, Architecture::EsmFold(_)) {
        let mut w = workload.clone();
        w.esmfold.chunk_size = None;
        let plain = max_length(arch, &w, runtime, capacity)?;
        w.esmfold.chunk_size = Some(*ESMFOLD_CHUNK_SIZES.last().unwrap_or(&4));
        let smallest = max_length(arch, &w, runtime, capacity)?;
        let choice = esmfold_chunk_that_fits(arch, workload, runtime, capacity)?;
        (plain, smallest, Some(choice))
    } else {
        (None, None, None)
    };
    let length = boundary(arch, workload, runtime, capacity, Axis::Length)?;
    let batch = boundary(arch, workload, runtime, capacity, Axis::Batch)?;
    let narrow = |v: Option<u64>| v.map(|v| v as u32);
    let as_given = on_card(arch, workload, runtime, capacity)?;
    Ok(GpuFit {
        gpu,
        fits: as_given.fits,
        releasing_cache_at: as_given.releasing_cache_at,
        max_length: narrow(length.longest),
        max_batch: narrow(batch.longest),
        length_runs_again_up_to: narrow(length.runs_again_up_to),
        batch_runs_again_up_to: narrow(batch.runs_again_up_to),
        length_without_freeing_cache: narrow(length.relying_on_freed_cache()),
        batch_without_freeing_cache: narrow(batch.relying_on_freed_cache()),
        max_length_unchunked: unchunked,
        max_length_chunked: chunked,
        chunk_for_length: chunk,
    })
}

/// The reservation a scheduler should request for a job whose driver-level
/// peak is `peak`: the peak plus `margin_percent` percent (a safety policy,
/// not physics: separate processes do not fragment each other), rounded up
/// to a whole MiB. Exact integer arithmetic.
pub fn reservation(peak: u64, margin_percent: u32) -> u64 {
    let with_margin = (peak as u128 * (100 + margin_percent as u128)).div_ceil(100);
    let mib = 1u128 << 20;
    (with_margin.div_ceil(mib) * mib).min(u64::MAX as u128) as u64
}

/// How many such jobs fit on a card at once: separate processes do not
/// fragment each other (measured: three ESMFold jobs peaked at exactly three
/// times one), so it is the usable memory over the reservation.
pub fn jobs_per_card(usable: u64, reservation: u64) -> u64 {
    usable.checked_div(reservation).unwrap_or(0)
}

/// The jobs a card's row shows, one rule for the CLI and the page: none
/// when the job does not fit ([`GpuFit::fits`]: its replay within
/// [`decision_capacity`]), else [`jobs_per_card`] and at least one: a job
/// can fit only because PyTorch frees its cache and retries when a
/// request fails, with a peak above the card when nothing is freed, and
/// so a reservation above the card's memory.
pub fn jobs_on_card(fits: bool, usable: u64, reservation: u64) -> u64 {
    if fits {
        jobs_per_card(usable, reservation).max(1)
    } else {
        0
    }
}
