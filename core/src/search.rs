//! Curves and fit searches built on [`estimate_with`].

use crate::arch::Architecture;
use crate::error::Error;
use crate::estimate::{estimate_reusing, estimate_with, Estimate, EstimateOptions};
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Workload, MAX_BATCH, MAX_IMAGE_SIZE, MAX_SEQ_LEN};
use alloc::string::String;
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

/// Whether `workload` runs within `capacity` bytes: its replay under that
/// capacity (PyTorch's cache freed and the request retried when one
/// fails) ends with every request served.
pub fn fits(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<bool, Error> {
    Ok(probe(arch, workload, runtime, capacity)?.fits)
}

/// What one replay under a capacity tells a fit search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Every request was served (the cache freed and retried where needed).
    pub fits: bool,
    /// It fits without ever reaching the capacity: the replay ran exactly
    /// as with an unlimited card. This part of the answer grows with the
    /// job (a longer or larger job never peaks lower before it reaches the
    /// capacity), so a bisection on it is sound; `fits` alone is not, near
    /// the capacity, where freeing the cache rescues some lengths and not
    /// their neighbours.
    pub within_capacity: bool,
    /// The driver-level peak of the replay under the capacity (0 where no
    /// replay ran: images under 16 px count as fitting).
    pub peak_on_card: u64,
}

/// [`fits`], with whether the replay reached the capacity.
pub fn probe(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<Probe, Error> {
    let e = estimate_with(
        arch,
        workload,
        runtime,
        EstimateOptions {
            capacity: Some(capacity),
            ..EstimateOptions::default()
        },
    )?;
    let fits = e.fits && e.outside_allocator.0 <= capacity;
    Ok(Probe {
        fits,
        within_capacity: fits && !e.reached_capacity,
        peak_on_card: e.driver_peak.0,
    })
}

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

/// The search for the longest length (or largest batch) in `[1, max]`
/// below which every value runs, one probe at a time.
///
/// Near a card's capacity whether a job runs is not monotone in its size:
/// when a `cudaMalloc` fails, PyTorch frees its cache and retries, and
/// whether the retry succeeds depends on how the live blocks sit in their
/// segments, which changes from one length to the next (the replay of
/// Llama 3.1 8B training on an H100 runs at 11,241 tokens, not at 11,242,
/// again at 11,244). A bisection on "runs" can land on any island. So:
/// 1. a bisection on [`Probe::within_capacity`] (the job never reaches the
///    capacity: it runs as on an unlimited card), `within`;
/// 2. a bisection on "runs", which ends on some value that runs with the
///    next one failing, `top`;
/// 3. a scan of `within..top` at [`SCAN_POINTS`] evenly spaced values; below
///    the first that fails, a scan of the interval since the last that ran
///    at as many points, and so on down to every value: the answer is the
///    value below that failure. Every value checked below it runs; a
///    failure narrower than the spacing of a level can go unseen;
/// 4. when `top` lies above the answer, it is reported apart as the top of
///    an island where the job runs again, never as the headline.
///
/// The page runs it a few probes per task, so that a table of slow
/// estimates never holds its thread for long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargestSearch {
    max: u64,
    phase: Phase,
    /// The bisection under way: the largest value known to pass, the
    /// smallest known to fail (or the next to probe while growing).
    lo: u64,
    hi: u64,
    growing: bool,
    /// Phase 1's answer: every value up to it runs within the capacity.
    within: u64,
    /// Phase 2's answer: a value that runs, the next one failing (0: none).
    top: u64,
    /// Phase 3: the interval scanned, its spacing and the next value.
    scan_from: u64,
    scan_to: u64,
    stride: u64,
    next: u64,
    /// The first value found not to run, once known.
    first_failure: Option<u64>,
}

/// Values checked per level of the scan in [`LargestSearch`] (phase 3).
pub const SCAN_POINTS: u64 = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Within,
    Runs,
    Scan,
    Done,
}

impl LargestSearch {
    /// A search over `[1, max]` (`max` at least 1).
    pub fn new(max: u64) -> LargestSearch {
        LargestSearch {
            max: max.max(1),
            phase: Phase::Within,
            lo: 0,
            hi: 1,
            growing: true,
            within: 0,
            top: 0,
            scan_from: 0,
            scan_to: 0,
            stride: 1,
            next: 0,
            first_failure: None,
        }
    }

    /// The value to test next; `None` once the search is over.
    pub fn probe(&self) -> Option<u64> {
        match self.phase {
            Phase::Within | Phase::Runs if self.growing => Some(self.hi.min(self.max)),
            Phase::Within | Phase::Runs => Some(self.lo + (self.hi - self.lo) / 2),
            Phase::Scan => Some(self.next),
            Phase::Done => None,
        }
    }

    /// Records whether the value [`LargestSearch::probe`] gave runs, and
    /// whether it runs without reaching the capacity.
    pub fn report(&mut self, outcome: Probe) {
        let Some(value) = self.probe() else { return };
        match self.phase {
            Phase::Within | Phase::Runs => {
                let pass = if self.phase == Phase::Within {
                    outcome.within_capacity
                } else {
                    outcome.fits
                };
                if pass {
                    self.lo = value;
                } else {
                    self.hi = value;
                    self.growing = false;
                }
                if self.growing {
                    if value >= self.max {
                        self.growing = false;
                        self.hi = self.max + 1;
                    } else {
                        // Doubling the distance from where the growth began.
                        let base = if self.phase == Phase::Within {
                            0
                        } else {
                            self.within
                        };
                        self.hi = base + (value - base).saturating_mul(2);
                    }
                }
                if !self.growing && self.hi - self.lo <= 1 {
                    self.end_bisection();
                }
            }
            Phase::Scan => {
                if outcome.fits {
                    self.scan_from = value;
                    if value >= self.scan_to {
                        // The whole interval ran: everything up to `top`.
                        self.phase = Phase::Done;
                        return;
                    }
                    self.next = (value + self.stride).min(self.scan_to);
                } else if self.stride == 1 || value - self.scan_from <= 1 {
                    self.first_failure = Some(value);
                    self.phase = Phase::Done;
                } else {
                    // Below this failure, since the last value that ran.
                    self.scan_to = value;
                    self.start_level();
                }
            }
            Phase::Done => {}
        }
    }

    fn end_bisection(&mut self) {
        if self.phase == Phase::Within {
            self.within = self.lo;
            if self.within >= self.max {
                self.top = self.max;
                self.phase = Phase::Done;
                return;
            }
            // Phase 2 grows from where phase 1 ended (`within` runs):
            // `within` + 1, + 2, + 4, ...
            self.phase = Phase::Runs;
            self.lo = self.within;
            self.hi = self.within + 1;
            self.growing = true;
            return;
        }
        self.top = self.lo;
        if self.top <= self.within {
            // Nothing above `within` was seen to run: the value above it fails.
            self.first_failure = Some(self.within + 1);
            self.phase = Phase::Done;
            return;
        }
        self.scan_from = self.within;
        self.scan_to = self.top;
        self.phase = Phase::Scan;
        self.start_level();
    }

    fn start_level(&mut self) {
        let span = self.scan_to - self.scan_from;
        self.stride = span.div_ceil(SCAN_POINTS).max(1);
        self.next = (self.scan_from + self.stride).min(self.scan_to);
    }

    /// The answer once the search is over: the largest value below which
    /// every value checked runs, `None` when even 1 does not (or while the
    /// search goes on).
    pub fn found(&self) -> Option<u64> {
        if self.phase != Phase::Done {
            return None;
        }
        let below = match self.first_failure {
            Some(f) => f - 1,
            None => self.top.max(self.within),
        };
        (below > 0).then_some(below)
    }

    /// Once the search is over, a value above the answer where the job runs
    /// again (the top of an island: it runs, the next one does not). `None`
    /// when none was seen.
    pub fn runs_again_up_to(&self) -> Option<u64> {
        match (self.phase, self.first_failure) {
            (Phase::Done, Some(f)) if self.top > f => Some(self.top),
            _ => None,
        }
    }

    /// Once the search is over, the largest value up to which every value
    /// runs without reaching the capacity (phase 1: as on an unlimited
    /// card, PyTorch never freeing its cache); `None` when even 1 reaches
    /// it, or while the search goes on.
    pub fn within_capacity_up_to(&self) -> Option<u64> {
        (self.phase == Phase::Done && self.within > 0).then_some(self.within)
    }

    /// Whether the search is over.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }
}

/// Largest value in `[1, max]` below which every value runs ([`LargestSearch`]).
fn largest(max: u64, mut ok: impl FnMut(u64) -> Result<Probe, Error>) -> Result<Boundary, Error> {
    let mut search = LargestSearch::new(max);
    while let Some(value) = search.probe() {
        search.report(ok(value)?);
    }
    Ok(Boundary {
        longest: search.found(),
        runs_again_up_to: search.runs_again_up_to(),
        within_capacity_up_to: search.within_capacity_up_to(),
    })
}

/// The answer of a fit search along one axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Boundary {
    /// The largest value below which every value runs (`None`: not even 1).
    pub longest: Option<u64>,
    /// Above the first value that does not run, a larger one that runs
    /// again (the top of an island); never an answer to plan on.
    pub runs_again_up_to: Option<u64>,
    /// The largest value up to which every value runs without reaching the
    /// capacity; between it and `longest` a job runs only because PyTorch
    /// frees its cache and retries, a path the replay models and one
    /// measurement found it to overestimate (chunked ESMFold under the RTX
    /// 4090's limit: `measurements/emulated-cards/`).
    pub within_capacity_up_to: Option<u64>,
}

impl Boundary {
    /// [`Boundary::within_capacity_up_to`] when the answer lies above it:
    /// the values above it up to `longest` run only through PyTorch freeing
    /// its cache. `Some(0)` when every value up to `longest` needs it.
    pub fn relying_on_freed_cache(&self) -> Option<u64> {
        let longest = self.longest?;
        let within = self.within_capacity_up_to.unwrap_or(0);
        (within < longest).then_some(within)
    }
}

/// What [`max_length`] and [`max_batch`] search along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Sequence length, or image size for vision models.
    Length,
    /// Batch size.
    Batch,
}

impl Axis {
    /// The largest value the workload accepts on this axis.
    pub fn limit(self, arch: &Architecture) -> u64 {
        match self {
            Axis::Length if arch.is_vision() => MAX_IMAGE_SIZE,
            Axis::Length => MAX_SEQ_LEN,
            Axis::Batch => MAX_BATCH,
        }
    }
}

/// Whether the workload with `value` on `axis` runs within `capacity`
/// bytes (one probe of [`max_length`] or [`max_batch`]).
pub fn fits_at(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
    axis: Axis,
    value: u64,
) -> Result<bool, Error> {
    Ok(probe_at(arch, workload, runtime, capacity, axis, value)?.fits)
}

/// [`fits_at`], with whether the replay reached the capacity.
pub fn probe_at(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
    axis: Axis,
    value: u64,
) -> Result<Probe, Error> {
    let vision = arch.is_vision();
    let value = value.min(u32::MAX as u64) as u32;
    let w = match axis {
        // Images start at 16 px: smaller ones count as fitting.
        Axis::Length if vision && value < 16 => {
            return Ok(Probe {
                fits: true,
                within_capacity: true,
                peak_on_card: 0,
            })
        }
        Axis::Length => workload.with_length(vision, value),
        Axis::Batch => Workload {
            batch: value,
            ..workload.clone()
        },
    };
    probe(arch, &w, runtime, capacity)
}

/// The fit search along `axis` within `capacity` bytes ([`LargestSearch`]).
pub fn boundary(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
    axis: Axis,
) -> Result<Boundary, Error> {
    largest(axis.limit(arch), |value| {
        probe_at(arch, workload, runtime, capacity, axis, value)
    })
}

/// The longest sequence (or largest image) below which every length runs
/// within `capacity` bytes of device memory, or `None` if even length 1
/// does not.
pub fn max_length(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<Option<u32>, Error> {
    let found = boundary(arch, workload, runtime, capacity, Axis::Length)?.longest;
    Ok(found.map(|l| l as u32))
}

/// The largest batch below which every batch runs within `capacity` bytes,
/// or `None`.
pub fn max_batch(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    capacity: u64,
) -> Result<Option<u32>, Error> {
    let found = boundary(arch, workload, runtime, capacity, Axis::Batch)?.longest;
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
    fn reservation_rounds_up_with_margin() {
        assert_eq!(reservation(1 << 30, 10), 1127 << 20);
        assert_eq!(reservation(1 << 30, 0), 1 << 30);
        assert_eq!(reservation(u64::MAX, 1000), u64::MAX);
        assert_eq!(jobs_per_card(10 << 30, 3 << 30), 3);
        assert_eq!(jobs_per_card(10 << 30, 0), 0);
    }

    #[test]
    fn esmfold_chunking_makes_long_sequences_fit() {
        let arch = crate::presets::find("esmfold-v1").unwrap().arch;
        let rt = RuntimeProfile::h200();
        let mut w = Workload {
            seq_len: 1536,
            ..Workload::default()
        };
        let h200 = crate::gpus::find("h200").unwrap().usable_bytes;
        // Unchunked, 1536 residues need L^3 logits well beyond 40 GB...
        let a100_40 = 40 * 1_000_000_000;
        assert_eq!(
            esmfold_chunk_that_fits(&arch, &w, &rt, h200).unwrap(),
            ChunkChoice::Unchunked
        );
        match esmfold_chunk_that_fits(&arch, &w, &rt, a100_40).unwrap() {
            ChunkChoice::Chunk(c) => assert!(c <= 256),
            other => panic!("expected a chunk size, got {other:?}"),
        }
        w.esmfold.chunk_size = None;
        let plain = max_length(&arch, &w, &rt, a100_40).unwrap().unwrap();
        w.esmfold.chunk_size = Some(4);
        let chunked = max_length(&arch, &w, &rt, a100_40).unwrap().unwrap();
        assert!(
            chunked > plain,
            "chunking lets longer proteins fit: {chunked} vs {plain}"
        );
    }

    /// A replay reused from one estimate to the next (as curves do) gives
    /// exactly what a fresh one gives, whatever ran on it before: here a
    /// training job, an out-of-memory fit search and an expandable-segments
    /// run, then the estimates again.
    #[test]
    fn a_reused_replay_answers_as_a_fresh_one() {
        let rt = RuntimeProfile::h200();
        let mut expandable = rt.clone();
        expandable.allocator.expandable_segments = true;
        let llama = crate::presets::find("llama-3.2-1b").unwrap().arch;
        let vit = crate::presets::find("vit-b-16").unwrap().arch;
        let train = Workload {
            mode: crate::workload::Mode::Training,
            seq_len: 512,
            ..Workload::default()
        };
        let infer = Workload::default();
        let tight = EstimateOptions {
            capacity: Some(2 << 30),
            ..EstimateOptions::default()
        };
        let runs: [(&Architecture, &Workload, &RuntimeProfile, EstimateOptions); 5] = [
            (&llama, &train, &rt, EstimateOptions::default()),
            (&llama, &infer, &rt, tight),
            (&vit, &train, &expandable, EstimateOptions::default()),
            (&llama, &train, &rt, EstimateOptions::default()),
            (&llama, &infer, &rt, tight),
        ];
        let mut replay = Replay::new(Default::default(), None);
        for (arch, workload, runtime, options) in runs {
            let fresh = estimate_with(arch, workload, runtime, options).unwrap();
            let reused = estimate_reusing(&mut replay, arch, workload, runtime, options).unwrap();
            assert_eq!(fresh, reused);
            assert_eq!(
                reused.fits,
                options.capacity.is_none(),
                "the tight runs run out"
            );
        }
    }

    fn monotone(x: u64, boundary: u64) -> Probe {
        Probe {
            fits: x <= boundary,
            within_capacity: x <= boundary,
            peak_on_card: 0,
        }
    }

    #[test]
    fn largest_finds_the_boundary() {
        let found = |b: u64| largest(1000, |x| Ok(monotone(x, b))).unwrap();
        assert_eq!(found(37).longest, Some(37));
        assert_eq!(found(5000).longest, Some(1000));
        assert_eq!(found(0).longest, None);
        assert_eq!(found(37).runs_again_up_to, None);
    }

    /// The probe-at-a-time search finds every boundary of every small
    /// range, within two probes per doubling (plus the first, the range's
    /// end and the check of the value above the boundary).
    #[test]
    fn the_stepwise_search_finds_every_boundary() {
        for max in 1..=130u64 {
            for boundary in 0..=max + 1 {
                let mut search = LargestSearch::new(max);
                let mut probes = 0;
                while let Some(x) = search.probe() {
                    assert!((1..=max).contains(&x), "probe {x} outside 1..={max}");
                    search.report(monotone(x, boundary));
                    probes += 1;
                }
                assert!(search.is_done());
                let expected = (boundary > 0).then_some(boundary.min(max));
                assert_eq!(search.found(), expected, "max {max}, boundary {boundary}");
                let doublings = 64 - max.leading_zeros() as u64;
                assert!(probes <= 2 * doublings + 3, "{probes} probes for max {max}");
            }
        }
    }

    /// Near the capacity a value can fail while larger ones run again (the
    /// cache freed and the request retried). The answer is the value below
    /// the first failure, checked one value at a time above the last one
    /// that ran within the capacity, whatever the islands above it; an
    /// island above is reported apart, with its top.
    #[test]
    fn a_failure_below_an_island_is_the_boundary() {
        // Within the capacity up to 40; above, runs except at 45..=47;
        // nothing above 90 runs.
        let outcome = |x: u64| Probe {
            fits: x <= 90 && !(45..=47).contains(&x),
            within_capacity: x <= 40,
            peak_on_card: 0,
        };
        let found = largest(1000, |x| Ok(outcome(x))).unwrap();
        assert_eq!(found.longest, Some(44));
        assert_eq!(found.runs_again_up_to, Some(90));
        let top = 90;
        assert!(outcome(top).fits && !outcome(top + 1).fits);
    }

    /// A failure narrower than a level's spacing can go unseen (the
    /// documented limit of the scan): here the scan of 40..=90 checks every
    /// second value, so a lone failure at 47 is not checked, and the answer
    /// is below the next failure it meets.
    #[test]
    fn a_failure_narrower_than_the_spacing_can_go_unseen() {
        let outcome = |x: u64| Probe {
            fits: x <= 90 && x != 47 && !(60..=69).contains(&x),
            within_capacity: x <= 40,
            peak_on_card: 0,
        };
        let mut search = LargestSearch::new(1000);
        let mut checked = Vec::new();
        while let Some(x) = search.probe() {
            checked.push(x);
            search.report(outcome(x));
        }
        assert!(!checked.contains(&47));
        assert_eq!(search.found(), Some(59));
        assert!((41..=59)
            .filter(|x| checked.contains(x))
            .all(|x| outcome(x).fits));
    }

    /// Every pattern on a small range in which "runs within the capacity" is
    /// monotone and implies "runs": the answer is the first failure less
    /// one, and an island, when reported, is a value that runs with the
    /// next one failing.
    #[test]
    fn every_small_pattern_is_answered_by_its_first_failure() {
        let max = 12u64;
        for within in 0..=max {
            // Bits of `fits` above `within` (every value up to it runs).
            for bits in 0u32..(1 << (max - within)) {
                let outcome = |x: u64| Probe {
                    fits: x <= within || (bits >> (x - within - 1)) & 1 == 1,
                    within_capacity: x <= within,
                    peak_on_card: 0,
                };
                let found = largest(max, |x| Ok(outcome(x))).unwrap();
                let first_failure = (1..=max).find(|&x| !outcome(x).fits);
                let expected = match first_failure {
                    Some(f) => (f > 1).then_some(f - 1),
                    None => Some(max),
                };
                assert_eq!(found.longest, expected, "within {within}, bits {bits:b}");
                if let Some(top) = found.runs_again_up_to {
                    assert!(top > first_failure.unwrap());
                    assert!(outcome(top).fits && (top == max || !outcome(top + 1).fits));
                }
            }
        }
    }
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

/// GPU counts the fewest-cards search tries: the sizes within one node
/// (1, 2, 4, 8), then whole 8-GPU nodes.
pub const GPU_COUNTS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The strategies that can spread `workload` over several cards: DDP,
/// ZeRO-1 and FSDP2 for decoder training (FSDP2 without LoRA, as it is
/// modelled; mixed precision as [`on_gpus`] applies it), tensor
/// parallelism for decoder inference; none for other models.
pub fn strategies_for(arch: &Architecture, workload: &Workload) -> Vec<Strategy> {
    use crate::workload::Mode;
    if !matches!(arch, Architecture::Decoder(_)) {
        return Vec::new();
    }
    match workload.mode {
        Mode::Training => {
            let mut all = alloc::vec![Strategy::Ddp, Strategy::Zero1];
            if workload.training.lora.is_none() {
                all.push(Strategy::Fsdp2);
            }
            all
        }
        Mode::Inference => alloc::vec![Strategy::Tp],
    }
}

/// Why `strategy` does not apply to this model and workload (tensor
/// parallelism is modelled for Llama-style decoders only), or `None` when
/// it does. A strategy that does not apply is a column without an answer,
/// never an error: the job on one card is still answered.
pub fn strategy_unavailable(
    arch: &Architecture,
    workload: &Workload,
    strategy: Strategy,
) -> Option<String> {
    match crate::families::validate(arch, &on_gpus(workload, strategy, 2)) {
        Err(Error::InvalidField { field, problem, .. }) if field == STRATEGY_FIELD => Some(problem),
        _ => None,
    }
}

/// The field whose error means "this strategy does not apply to the model".
const STRATEGY_FIELD: &str = "workload.parallel.strategy";

/// Whether an error of one rank's estimate means that GPU count (or the
/// strategy itself) has no answer for this model rather than a bad input:
/// a count that does not divide the heads, or a strategy that does not
/// apply ([`strategy_unavailable`]).
pub fn no_answer_at_count(error: &Error) -> bool {
    matches!(
        error.field(),
        Some("workload.parallel.world_size") | Some(STRATEGY_FIELD)
    )
}

/// The workload on `count` GPUs with `strategy` (`batch` per rank); one
/// GPU runs the job as given, without a strategy. Mixed precision under
/// FSDP2 is FSDP2's own ([`fsdp2_mixed_precision`]).
pub fn on_gpus(workload: &Workload, strategy: Strategy, count: u32) -> Workload {
    let mut w = workload.clone();
    w.parallel.strategy = if count == 1 { Strategy::None } else { strategy };
    w.parallel.world_size = count;
    if w.parallel.strategy == Strategy::Fsdp2 {
        fsdp2_mixed_precision(&mut w);
    }
    w
}

/// A job written with autocast (`amp_bf16`, `amp_fp16`) as FSDP2 runs it
/// under the HF `Trainer` and accelerate (accelerate 1.15
/// `fsdp2_prepare_model` and `FullyShardedDataParallelPlugin
/// .set_mixed_precision`): fp32 sharded master weights, gathered for
/// compute in the autocast dtype (`MixedPrecisionPolicy(param_dtype)`),
/// gradients reduce-scattered in that dtype too (`reduce_dtype`). The
/// autocast context accelerate keeps around the forward, a no-op on
/// weights already gathered in that dtype, is not replayed.
pub fn fsdp2_mixed_precision(workload: &mut Workload) {
    use crate::workload::Precision;
    let dtype = match workload.training.precision {
        Precision::AmpBf16 => crate::arch::Dtype::Bf16,
        Precision::AmpFp16 => crate::arch::Dtype::Fp16,
        _ => return,
    };
    workload.training.precision = Precision::Fp32;
    workload.parallel.param_dtype = dtype;
    workload.parallel.reduce_dtype = dtype;
}

/// One rank's driver-level peak with `strategy` at each of [`GPU_COUNTS`],
/// ascending, stopping after the first count whose peak is at most
/// `stop_below` bytes (no card of interest needs more GPUs than that).
/// A count the strategy cannot use (tensor parallelism over a count that
/// does not divide the heads) has no peak.
pub fn rank_peaks(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    strategy: Strategy,
    stop_below: u64,
) -> Result<Vec<(u32, Option<u64>)>, Error> {
    let mut peaks = Vec::new();
    for count in GPU_COUNTS {
        let w = on_gpus(workload, strategy, count);
        let peak = match estimate_with(arch, &w, runtime, EstimateOptions::default()) {
            Ok(e) => Some(e.driver_peak.0),
            Err(e) if no_answer_at_count(&e) => None,
            Err(e) => return Err(e),
        };
        peaks.push((count, peak));
        if peak.is_some_and(|p| p <= stop_below) {
            break;
        }
    }
    Ok(peaks)
}

/// The fewest cards of a row ([`GpuFit`]) that run the job with one
/// strategy: one when the job, on one GPU as given, fits the card
/// (`fits_as_given`), whatever the strategy's wider range says of one
/// rank; else [`fewest_gpus`] of the strategy's peaks within the card's
/// [`strategy_capacity`]. One rule for the CLI's table and Python's.
pub fn fewest_cards_on_row(
    fits_as_given: bool,
    workload: &Workload,
    peaks: &[(u32, Option<u64>)],
    capacity: u64,
) -> Option<u32> {
    if fits_as_given && workload.parallel.strategy == Strategy::None {
        Some(1)
    } else {
        fewest_gpus(peaks, capacity)
    }
}

/// The fewest GPUs (from [`rank_peaks`]) whose per-rank peak fits `usable`
/// bytes, or `None` when no count tried does.
pub fn fewest_gpus(peaks: &[(u32, Option<u64>)], usable: u64) -> Option<u32> {
    peaks
        .iter()
        .find(|(_, peak)| peak.is_some_and(|p| p <= usable))
        .map(|&(count, _)| count)
}
