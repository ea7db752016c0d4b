//! Whether a job runs within a capacity, and the search for the longest
//! length or largest batch that does (near a card's end, where PyTorch
//! frees its cache and retries, not a plain bisection).

use crate::arch::Architecture;
use crate::error::Error;
use crate::estimate::{estimate_with, EstimateOptions};
use crate::runtime::RuntimeProfile;
use crate::workload::{Workload, MAX_BATCH, MAX_IMAGE_SIZE, MAX_SEQ_LEN};

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
    use crate::search::*;
    use alloc::vec::Vec;

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
