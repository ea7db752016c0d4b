//! Curves and fit searches built on [`estimate_with`].

use crate::arch::Architecture;
use crate::error::Error;
use crate::estimate::{estimate_with, Estimate, EstimateOptions};
use crate::runtime::RuntimeProfile;
use crate::workload::{Workload, MAX_BATCH, MAX_IMAGE_SIZE, MAX_SEQ_LEN};
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
pub fn curve(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
) -> Result<Vec<CurvePoint>, Error> {
    let vision = arch.is_vision();
    let mut sorted: Vec<u32> = lengths.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<CurvePoint> = Vec::with_capacity(sorted.len());
    for length in sorted {
        let w = workload.with_length(vision, length);
        let mut estimate = estimate_with(arch, &w, runtime, EstimateOptions::default())?;
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

fn fits(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<bool, Error> {
    let e = estimate_with(
        arch,
        workload,
        runtime,
        EstimateOptions {
            capacity: Some(capacity),
        },
    )?;
    Ok(e.fits && e.outside_allocator.0 <= capacity)
}

/// Largest value in `[1, max]` for which `ok` holds, assuming `ok` is
/// monotone (true up to some point, false after). `None` when even 1 fails.
fn largest(max: u64, mut ok: impl FnMut(u64) -> Result<bool, Error>) -> Result<Option<u64>, Error> {
    if !ok(1)? {
        return Ok(None);
    }
    // Exponential probe, then bisection.
    let mut lo = 1u64;
    let mut hi = 2u64;
    while hi <= max && ok(hi)? {
        lo = hi;
        hi *= 2;
    }
    if hi > max {
        if ok(max)? {
            return Ok(Some(max));
        }
        hi = max;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some(lo))
}

/// The longest sequence (or largest image) that runs within `capacity`
/// bytes of device memory, or `None` if even length 1 does not.
pub fn max_length(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<Option<u32>, Error> {
    let vision = arch.is_vision();
    let limit = if vision { MAX_IMAGE_SIZE } else { MAX_SEQ_LEN };
    let found = largest(limit, |len| {
        if vision && len < 16 {
            return Ok(true);
        }
        fits(
            arch,
            &workload.with_length(vision, len as u32),
            runtime,
            capacity,
        )
    })?;
    Ok(found.map(|l| l as u32))
}

/// The largest batch that runs within `capacity` bytes, or `None`.
pub fn max_batch(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<Option<u32>, Error> {
    let found = largest(MAX_BATCH, |b| {
        let mut w = workload.clone();
        w.batch = b as u32;
        fits(arch, &w, runtime, capacity)
    })?;
    Ok(found.map(|b| b as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_ascending_unique_and_span_the_range() {
        let l = lengths(128, 131072, 256, true);
        assert_eq!(l.first(), Some(&128));
        assert_eq!(l.last(), Some(&131072));
        assert!(l.windows(2).all(|w| w[0] < w[1]));
        let lin = lengths(1, 10, 256, false);
        assert_eq!(lin, (1..=10).collect::<Vec<_>>());
    }

    #[test]
    fn largest_finds_the_boundary() {
        assert_eq!(largest(1000, |x| Ok(x <= 37)).unwrap(), Some(37));
        assert_eq!(largest(1000, |x| Ok(x <= 5000)).unwrap(), Some(1000));
        assert_eq!(largest(1000, |_| Ok(false)).unwrap(), None);
    }
}
