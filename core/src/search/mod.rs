//! Curves and fit searches built on [`estimate_with`]: the curve of peaks
//! by length (here), the search for the longest length or largest batch a
//! capacity runs ([`boundary`]), a card's answer for a job ([`cards`]) and
//! the fewest cards with each strategy ([`several_gpus`]).

mod boundary;
mod cards;
mod several_gpus;

pub use boundary::*;
pub use cards::*;
pub use several_gpus::*;

use crate::arch::Architecture;
use crate::error::Error;
#[cfg(doc)]
use crate::estimate::estimate_with;
use crate::estimate::{estimate_reusing, Estimate, EstimateOptions};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;
use alloc::vec::Vec;

/// One point of a curve.
#[derive(Clone, Debug, PartialEq)]
pub struct CurvePoint {
    /// Sequence length (or image size for vision models).
    pub length: u32,
    /// The estimate at that length.
    pub estimate: Estimate,
    /// When the exact replay at this length peaked lower than at a shorter
    /// length, the curve carries that shorter length's estimate; this is it.
    pub monotone_from: Option<u32>,
}

/// Estimates the workload at each length (sequence length, or image size
/// for vision models), ascending.
///
/// Each point is an exact replay, except that a point whose peak is below
/// a shorter point's (the allocator can fragment a little less on a longer
/// run, by a few segments) reports that shorter point's peak instead: the
/// curve is the running maximum, so it is monotone and never below the
/// exact replay. `monotone_from` on the point says where that happened.
/// With the `std` feature, outside WebAssembly, the replays run in parallel
/// on every core (the result is the same).
pub fn curve(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
) -> Result<Vec<CurvePoint>, Error> {
    let mut sorted: Vec<u32> = lengths.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let estimates = estimate_each(arch, workload, runtime, &sorted)?;
    let mut out: Vec<CurvePoint> = Vec::with_capacity(sorted.len());
    for (length, mut estimate) in sorted.into_iter().zip(estimates) {
        let mut monotone_from = None;
        if let Some(prev) = out.last() {
            if prev.estimate.driver_peak > estimate.driver_peak {
                monotone_from = Some(prev.monotone_from.unwrap_or(prev.length));
                estimate = prev.estimate.clone();
            }
        }
        out.push(CurvePoint {
            length,
            estimate,
            monotone_from,
        });
    }
    Ok(out)
}

/// The exact estimate at one length, replayed on `replay` (reused from
/// one length to the next).
fn estimate_at(
    replay: &mut Replay,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    length: u32,
) -> Result<Estimate, Error> {
    let w = workload.with_length(arch.is_vision(), length);
    estimate_reusing(replay, arch, &w, runtime, EstimateOptions::default())
}

/// The exact estimate at each length, in order. The replays are
/// independent: with `std` (outside the browser) they run on every core,
/// each thread taking every n-th length so that long and short replays
/// spread evenly.
fn estimate_each(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
) -> Result<Vec<Estimate>, Error> {
    let one =
        |replay: &mut Replay, length: u32| estimate_at(replay, arch, workload, runtime, length);
    #[cfg(all(feature = "std", not(target_arch = "wasm32")))]
    if let Some(all) = estimate_in_parallel(lengths, &one) {
        return all;
    }
    let mut replay = Replay::new(runtime.allocator, None);
    lengths.iter().map(|&l| one(&mut replay, l)).collect()
}

/// [`estimate_each`] on every core; `None` when one thread would do.
#[cfg(all(feature = "std", not(target_arch = "wasm32")))]
fn estimate_in_parallel(
    lengths: &[u32],
    one: &(dyn Fn(&mut Replay, u32) -> Result<Estimate, Error> + Sync),
) -> Option<Result<Vec<Estimate>, Error>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(lengths.len().div_ceil(8).max(1));
    if threads <= 1 {
        return None;
    }
    let mut slots: Vec<Option<Result<Estimate, Error>>> = alloc::vec![None; lengths.len()];
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut replay = Replay::new(Default::default(), None);
                    (t..lengths.len())
                        .step_by(threads)
                        .map(|i| (i, one(&mut replay, lengths[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for worker in workers {
            let done = worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (i, result) in done {
                slots[i] = Some(result);
            }
        }
    });
    Some(
        slots
            .into_iter()
            .map(|slot| slot.expect("every length was estimated"))
            .collect(),
    )
}

/// `count` lengths from `min` to `max`, evenly spaced (or geometric when
/// `log` is true), deduplicated and ascending.
pub fn lengths(min: u32, max: u32, count: usize, log: bool) -> Vec<u32> {
    let (min, max) = (min.max(1), max.max(min.max(1)));
    let count = count.max(2);
    let mut out: Vec<u32> = (0..count)
        .map(|i| {
            let t = i as f64 / (count - 1) as f64;
            let x = if log {
                libm::exp(libm::log(min as f64) * (1.0 - t) + libm::log(max as f64) * t)
            } else {
                min as f64 + (max - min) as f64 * t
            };
            (libm::round(x) as u32).clamp(min, max)
        })
        .collect();
    out.dedup();
    out
}
