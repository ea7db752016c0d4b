//! The main curve: core estimates at each length, and the stacked series the
//! chart draws from them. Only unit conversion happens here.

use crate::state::View;
use headroom_core::arch::Architecture;
use headroom_core::estimate::{estimate_reusing, Component, Estimate, EstimateOptions};
use headroom_core::search::lengths;
use headroom_core::trace::Replay;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;

/// Estimates along the length axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurveData {
    /// Lengths that estimated, ascending.
    pub lengths: Vec<u32>,
    /// The estimate at each of [`CurveData::lengths`].
    pub estimates: Vec<Estimate>,
    /// Lengths the core rejected.
    pub failed: usize,
    /// The first rejection, with its length.
    pub error: Option<(u32, String)>,
}

/// One length's outcome: the estimate, or the core's message.
pub type PointResult = Result<Estimate, String>;

thread_local! {
    /// This thread's replay between estimates, its arrays kept.
    static SPARE_REPLAY: std::cell::RefCell<Option<Replay>> =
        const { std::cell::RefCell::new(None) };
}

/// A replay whose arrays are kept from this thread's earlier estimates (a
/// new one when none is spare): the first replay on fresh arrays is the
/// slowest. Give it back with [`put_back_replay`].
pub fn take_replay(runtime: &RuntimeProfile) -> Replay {
    SPARE_REPLAY
        .with(|r| r.borrow_mut().take())
        .unwrap_or_else(|| Replay::new(runtime.allocator, None))
}

/// Keeps `replay` for this thread's next estimates.
pub fn put_back_replay(replay: Replay) {
    SPARE_REPLAY.with(|r| *r.borrow_mut() = Some(replay));
}

/// The exact estimate at each of `lengths`, in order, on one replay whose
/// arrays are kept from one estimate to the next. This is all a curve
/// costs; the page splits the lengths over worker threads ([`share`]) and
/// reassembles them ([`CurveData::from_results`]).
pub fn estimate_lengths(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
) -> Vec<PointResult> {
    let mut replay = take_replay(runtime);
    let out = lengths
        .iter()
        .map(|&length| estimate_point(&mut replay, arch, workload, runtime, length))
        .collect();
    put_back_replay(replay);
    out
}

/// The exact estimate at one length, on `replay` (reused from one length
/// to the next).
pub fn estimate_point(
    replay: &mut Replay,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    length: u32,
) -> PointResult {
    let w = workload.with_length(arch.is_vision(), length);
    estimate_reusing(replay, arch, &w, runtime, EstimateOptions::default())
        .map_err(|e| e.to_string())
}

/// Share `k` of `parts` of the lengths: every `parts`-th length from the
/// `k`-th, so that short and long replays spread evenly over the threads.
pub fn share(lengths: &[u32], parts: usize, k: usize) -> Vec<u32> {
    lengths
        .iter()
        .skip(k)
        .step_by(parts.max(1))
        .copied()
        .collect()
}

/// The lengths dealt out to threads in proportion to `weights` (one per
/// thread, each > 0): each length in turn goes to the thread whose share is
/// smallest against its weight (the first such on ties, so the first length
/// is the first thread's). Every share keeps the order of `lengths` and
/// spreads over it, as [`share`]'s do; with equal weights they are
/// [`share`]'s.
pub fn weighted_shares(lengths: &[u32], weights: &[f64]) -> Vec<Vec<u32>> {
    let mut shares: Vec<Vec<u32>> = vec![Vec::new(); weights.len()];
    for &length in lengths {
        let load = |k: usize| shares[k].len() as f64 / weights[k];
        let Some(k) = (0..weights.len()).reduce(|a, b| if load(b) < load(a) { b } else { a })
        else {
            break;
        };
        shares[k].push(length);
    }
    shares
}

/// The page's thread's weight for the next curve's [`weighted_shares`]
/// (each worker's is 1), from how the last one went: the page's thread
/// computed `page_points` in `page_ms`, from the curve's start to the end
/// of its share (its drawing and the page's other updates slow it), each
/// worker `(points, ms)` from the curve's start to its answer. Half-way from `old` to
/// the weight that would have had every thread finish together, within
/// [`MIN_PAGE_WEIGHT`]..=[`MAX_PAGE_WEIGHT`]; `old` when a figure is
/// missing.
pub fn next_page_weight(
    old: f64,
    page_points: usize,
    page_ms: f64,
    workers: &[(usize, f64)],
) -> f64 {
    let rate = |points: usize, ms: f64| (points > 0 && ms > 0.0).then(|| points as f64 / ms);
    let Some(page) = rate(page_points, page_ms) else {
        return old;
    };
    let Some(rates) = workers
        .iter()
        .map(|&(points, ms)| rate(points, ms))
        .collect::<Option<Vec<f64>>>()
        .filter(|r| !r.is_empty())
    else {
        return old;
    };
    let worker = rates.iter().sum::<f64>() / rates.len() as f64;
    (0.5 * old + 0.5 * page / worker).clamp(MIN_PAGE_WEIGHT, MAX_PAGE_WEIGHT)
}

/// Bounds of [`next_page_weight`]: the page's thread keeps at least a
/// quarter of a worker's share (the chosen length and the first points are
/// its own), and at most twice one.
pub const MIN_PAGE_WEIGHT: f64 = 0.25;
/// See [`MIN_PAGE_WEIGHT`].
pub const MAX_PAGE_WEIGHT: f64 = 2.0;

/// The lengths of the curve over the view's range (geometric on a log axis).
pub fn view_lengths(view: &View, count: usize) -> Vec<u32> {
    lengths(view.from, view.to, count, view.log_x)
}

/// `lengths` (ascending) in the order that spreads the first ones computed
/// over the whole range: the ends, the middle, the quarters' middles, and
/// so on, each length once. The page draws a curve's first points from the
/// front of this order, then refines it with the rest.
pub fn spread_order(lengths: &[u32]) -> Vec<u32> {
    let n = lengths.len();
    let mut order: Vec<usize> = match n {
        0 => return Vec::new(),
        1 => vec![0],
        _ => vec![0, n - 1],
    };
    let mut intervals = std::collections::VecDeque::from([(0, n - 1)]);
    while let Some((lo, hi)) = intervals.pop_front() {
        if hi - lo < 2 {
            continue;
        }
        let mid = lo + (hi - lo) / 2;
        order.push(mid);
        intervals.push_back((lo, mid));
        intervals.push_back((mid, hi));
    }
    order.into_iter().map(|i| lengths[i]).collect()
}

impl CurveData {
    /// Estimates `count` lengths over the view's range on this thread.
    pub fn compute(
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
        view: &View,
        count: usize,
    ) -> CurveData {
        let lengths = view_lengths(view, count);
        let results = estimate_lengths(arch, workload, runtime, &lengths);
        CurveData::from_results(&lengths, results)
    }

    /// Assembles a curve from the outcome at each length (in any order;
    /// `lengths[i]` goes with `results[i]`).
    pub fn from_results(lengths: &[u32], results: Vec<PointResult>) -> CurveData {
        let mut points: Vec<(u32, PointResult)> = lengths.iter().copied().zip(results).collect();
        crate::sort::by_key(&mut points, |p| (p.0.into(), 0));
        let mut out = CurveData::default();
        for (length, result) in points {
            match result {
                Ok(e) => {
                    out.lengths.push(length);
                    out.estimates.push(e);
                }
                Err(e) => {
                    out.failed += 1;
                    if out.error.is_none() {
                        out.error = Some((length, e));
                    }
                }
            }
        }
        out
    }

    /// This curve with `other`'s lengths added (both computed for the same
    /// inputs; `other` holds none of this curve's lengths).
    pub fn merge(self, other: CurveData) -> CurveData {
        let mut points: Vec<(u32, Estimate)> = self
            .lengths
            .into_iter()
            .zip(self.estimates)
            .chain(other.lengths.into_iter().zip(other.estimates))
            .collect();
        crate::sort::by_key(&mut points, |p| (p.0.into(), 0));
        let (lengths, estimates) = points.into_iter().unzip();
        let error = match (self.error, other.error) {
            (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        CurveData {
            lengths,
            estimates,
            failed: self.failed + other.failed,
            error,
        }
    }

    /// Index of the estimate nearest to `length` on the axis.
    pub fn nearest(&self, length: f64, log_x: bool) -> Option<usize> {
        let key = |l: f64| if log_x { l.max(1.0).ln() } else { l };
        let target = key(length);
        (0..self.lengths.len()).min_by(|&a, &b| {
            let da = (key(self.lengths[a] as f64) - target).abs();
            let db = (key(self.lengths[b] as f64) - target).abs();
            da.total_cmp(&db)
        })
    }

    /// Largest driver-level peak on the curve, GB.
    pub fn max_gb(&self) -> f64 {
        self.estimates
            .iter()
            .map(|e| e.driver_peak.as_gb())
            .fold(0.0, f64::max)
    }
}

/// One band of the stacked chart: a component and the cumulative top of its
/// band at each length, in GB.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    /// The component.
    pub component: Component,
    /// Bottom of the band at each length, GB.
    pub lower: Vec<f64>,
    /// Top of the band at each length, GB.
    pub upper: Vec<f64>,
}

/// Stacks the breakdown in [`Component::ALL`] order, leaving out components
/// that are zero at every length. The last band's top is the driver peak.
pub fn bands(curve: &CurveData) -> Vec<Band> {
    let n = curve.estimates.len();
    let mut running = vec![0.0f64; n];
    let mut out = Vec::new();
    for component in Component::ALL {
        let values: Vec<f64> = curve
            .estimates
            .iter()
            .map(|e| e.component(component).as_gb())
            .collect();
        if values.iter().all(|&v| v == 0.0) {
            continue;
        }
        let lower = running.clone();
        for (r, v) in running.iter_mut().zip(&values) {
            *r += v;
        }
        out.push(Band {
            component,
            lower,
            upper: running.clone(),
        });
    }
    out
}

/// The likely range of the total at each length of the curve, low and high
/// GB, from the errors measured for the job's family, mode and strategy
/// (`headroom_core::uncertainty`). The curve is replayed with the page's
/// runtime, the H200's or a loaded profile's: overheads that were measured,
/// so the range is not widened for an unmeasured card.
pub fn likely_band(
    curve: &CurveData,
    arch: &headroom_core::arch::Architecture,
    workload: &headroom_core::Workload,
) -> Vec<(f64, f64)> {
    // One band for the whole curve (a quantized job's takes two replays).
    let band = headroom_core::uncertainty::band_for(arch, workload);
    curve
        .estimates
        .iter()
        .map(|e| {
            let range = headroom_core::uncertainty::range_of(
                band,
                e.driver_peak,
                e.outside_allocator,
                true,
            );
            (range.low.as_gb(), range.high.as_gb())
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use headroom_core::estimate::Share;
    use headroom_core::Bytes;

    /// A synthetic estimate: weights fixed, activations growing with length.
    pub fn fake(length: u32) -> Estimate {
        let gb = 1_000_000_000u64;
        let parts = [
            (Component::CudaContext, gb / 2),
            (Component::Weights, 16 * gb),
            (Component::KvCache, length as u64 * 131_072),
            (Component::Activations, length as u64 * 50_000),
            (Component::AllocatorSlack, gb / 10),
        ];
        let breakdown: Vec<Share> = parts
            .iter()
            .map(|&(component, b)| Share {
                component,
                bytes: Bytes(b),
            })
            .collect();
        let total: u64 = parts.iter().map(|p| p.1).sum();
        Estimate {
            driver_peak: Bytes(total),
            reserved_peak: Bytes(total - gb / 2),
            allocated_peak: Bytes(total - gb / 2 - gb / 10),
            outside_allocator: Bytes(gb / 2),
            breakdown,
            peak_op: "layer 31: mlp, down_proj".into(),
            params: 8_030_261_248,
            weight_bytes: Bytes(16 * gb),
            fits: true,
            reached_capacity: false,
        }
    }

    pub fn fake_curve(lengths: &[u32]) -> CurveData {
        CurveData {
            lengths: lengths.to_vec(),
            estimates: lengths.iter().map(|&l| fake(l)).collect(),
            failed: 0,
            error: None,
        }
    }

    #[test]
    fn bands_stack_to_the_driver_peak_and_skip_empty_components() {
        let curve = fake_curve(&[128, 1024, 65536]);
        let b = bands(&curve);
        assert_eq!(b.len(), 5);
        assert_eq!(b[0].component, Component::CudaContext);
        for (i, e) in curve.estimates.iter().enumerate() {
            let top = b.last().unwrap().upper[i];
            assert!((top - e.driver_peak.as_gb()).abs() < 1e-9);
            for w in b.windows(2) {
                assert_eq!(w[0].upper[i], w[1].lower[i]);
            }
        }
    }

    #[test]
    fn nearest_uses_the_axis_scale() {
        let curve = fake_curve(&[100, 1000, 10000]);
        assert_eq!(curve.nearest(400.0, true), Some(1));
        assert_eq!(curve.nearest(400.0, false), Some(0));
        assert_eq!(CurveData::default().nearest(5.0, false), None);
    }

    /// Splitting the lengths over threads and putting the shares back
    /// together gives the curve one thread computes.
    #[test]
    fn shares_reassemble_into_the_single_thread_curve() {
        let p = headroom_core::presets::find("llama-3.2-1b").unwrap();
        let s = crate::state::AppState::for_model(p.model());
        let rt = RuntimeProfile::h200();
        let whole = CurveData::compute(&p.arch, &s.workload, &rt, &s.view, 24);
        let all = view_lengths(&s.view, 24);
        for parts in [1, 2, 3, 7] {
            let mut lengths = Vec::new();
            let mut results = Vec::new();
            for k in 0..parts {
                let mine = share(&all, parts, k);
                results.extend(estimate_lengths(&p.arch, &s.workload, &rt, &mine));
                lengths.extend(mine);
            }
            assert_eq!(lengths.len(), all.len());
            assert_eq!(
                CurveData::from_results(&lengths, results),
                whole,
                "{parts} parts"
            );
        }
        assert_eq!(share(&[1, 2, 3, 4, 5], 2, 1), vec![2, 4]);
        assert!(share(&[1, 2], 3, 2).is_empty());
    }

    /// Weighted shares hand out every length once, in order, in proportion
    /// to the weights; equal weights give the plain shares.
    #[test]
    fn weighted_shares_follow_their_weights() {
        let all: Vec<u32> = (1..=256).collect();
        for parts in [1, 2, 3, 7] {
            let equal = weighted_shares(&all, &vec![1.0; parts]);
            for (k, mine) in equal.iter().enumerate() {
                assert_eq!(*mine, share(&all, parts, k), "{parts} parts, share {k}");
            }
        }
        let shares = weighted_shares(&all, &[0.6, 1.0]);
        assert_eq!(shares[0].len(), 96, "256 x 0.6 / 1.6");
        assert_eq!(shares[1].len(), 160);
        for mine in &shares {
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "in order");
        }
        let mut every: Vec<u32> = shares.concat();
        every.sort_unstable();
        assert_eq!(every, all, "each length once");
        // The first length is the first thread's (the page's thread computes
        // the chosen length first), and each share spreads over the order.
        assert_eq!(shares[0][..4], [1, 4, 7, 9]);
        assert_eq!(shares[1][..4], [2, 3, 5, 6]);
        assert!(weighted_shares(&[], &[1.0, 2.0]).iter().all(Vec::is_empty));
        assert!(weighted_shares(&all, &[]).is_empty());
    }

    /// The page's weight moves half-way toward the split that would have
    /// finished every thread together, stays within its bounds, and stays
    /// put without figures.
    #[test]
    fn the_page_weight_moves_toward_a_balanced_split() {
        // The page's thread did 128 points in 150 ms, the worker 128 in
        // 100 ms: the page runs at 2/3 of the worker's rate.
        let w = next_page_weight(1.0, 128, 150.0, &[(128, 100.0)]);
        assert!((w - (0.5 + 0.5 * 2.0 / 3.0)).abs() < 1e-12, "{w}");
        // Repeated, it settles where both finish together.
        let (mut w, total): (f64, f64) = (1.0, 256.0);
        for _ in 0..30 {
            let page = (total * w / (w + 1.0)).round() as usize;
            let worker = 256 - page;
            // The page's thread: 1 point per ms, plus 20 ms of drawing.
            w = next_page_weight(w, page, page as f64 + 20.0, &[(worker, worker as f64)]);
        }
        let page = total * w / (w + 1.0);
        assert!(
            (page + 20.0 - (total - page)).abs() < 3.0,
            "page {page:.1} points"
        );
        assert_eq!(
            next_page_weight(1.0, 10, 1.0, &[(1, 100.0)]),
            MAX_PAGE_WEIGHT
        );
        assert_eq!(
            next_page_weight(0.3, 1, 100.0, &[(10, 1.0)]),
            MIN_PAGE_WEIGHT
        );
        assert_eq!(next_page_weight(0.7, 0, 10.0, &[(10, 10.0)]), 0.7);
        assert_eq!(next_page_weight(0.7, 10, 10.0, &[]), 0.7);
        assert_eq!(next_page_weight(0.7, 10, 10.0, &[(10, 0.0)]), 0.7);
    }

    /// Each point's band is the core's likely range of that point's total:
    /// it holds the total, and a job on several GPUs takes its strategy's
    /// band.
    #[test]
    fn the_likely_band_holds_each_total() {
        let curve = fake_curve(&[512, 1024, 2048]);
        let preset = headroom_core::presets::find("llama-3.2-1b").unwrap();
        let mut workload = headroom_core::Workload::default();
        workload.mode = headroom_core::workload::Mode::Training;
        let band = likely_band(&curve, &preset.arch, &workload);
        assert_eq!(band.len(), 3);
        for (e, (low, high)) in curve.estimates.iter().zip(&band) {
            let total = e.driver_peak.as_gb();
            assert!(*low < total && total < *high, "{low} < {total} < {high}");
            let expected = headroom_core::uncertainty::likely_range(
                &preset.arch,
                &workload,
                e.driver_peak,
                e.outside_allocator,
                true,
            );
            assert_eq!(*high, expected.high.as_gb());
        }
        workload.parallel.strategy = headroom_core::parallel::Strategy::Ddp;
        workload.parallel.world_size = 2;
        let ddp = likely_band(&curve, &preset.arch, &workload);
        assert!(ddp[0].1 > band[0].1, "DDP's measured runs reach higher");
    }

    /// The first lengths of the spread order cover the whole range evenly,
    /// and the order holds every length once.
    #[test]
    fn the_spread_order_starts_with_lengths_over_the_whole_range() {
        let all: Vec<u32> = (0..256).map(|i| 100 + 10 * i).collect();
        let order = spread_order(&all);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, all);
        assert_eq!(&order[..3], &[100, 2650, 1370]);
        // The first 17 are spaced at most 16 steps apart.
        let mut first: Vec<u32> = order[..17].to_vec();
        first.sort_unstable();
        assert!(first.windows(2).all(|w| w[1] - w[0] <= 160), "{first:?}");
        for n in 0..6 {
            let few: Vec<u32> = (0..n).collect();
            let mut order = spread_order(&few);
            order.sort_unstable();
            assert_eq!(order, few);
        }
    }

    /// A curve drawn from its first points, then refined with the rest, is
    /// the curve computed at once.
    #[test]
    fn a_first_draw_merged_with_the_rest_is_the_whole_curve() {
        let p = headroom_core::presets::find("vit-b-16").unwrap();
        let s = crate::state::AppState::for_model(p.model());
        let rt = RuntimeProfile::h200();
        // Image sizes below 16 px are rejected: errors merge too.
        let all: Vec<u32> = (1..=24).map(|i| i * 4).collect();
        let whole =
            CurveData::from_results(&all, estimate_lengths(&p.arch, &s.workload, &rt, &all));
        assert!(whole.failed > 0);
        let order = spread_order(&all);
        for cut in [0, 1, 5, 24] {
            let (first, rest) = order.split_at(cut);
            let part = |l: &[u32]| {
                CurveData::from_results(l, estimate_lengths(&p.arch, &s.workload, &rt, l))
            };
            assert_eq!(part(first).merge(part(rest)), whole, "cut at {cut}");
            assert_eq!(part(rest).merge(part(first)), whole, "cut at {cut}");
        }
    }

    #[test]
    fn the_first_rejected_length_is_reported_in_length_order() {
        let lengths = [300, 100, 200];
        let results = vec![Err("c".into()), Ok(fake(100)), Err("b".into())];
        let c = CurveData::from_results(&lengths, results);
        assert_eq!(c.lengths, vec![100]);
        assert_eq!(c.failed, 2);
        assert_eq!(c.error, Some((200, "b".into())));
    }

    #[test]
    fn core_errors_are_kept_not_panicked() {
        // Whatever the families support today, computing never panics and
        // every length is either estimated or counted as failed.
        for p in headroom_core::presets::all() {
            let s = crate::state::AppState::for_model(p.model());
            let c = CurveData::compute(&p.arch, &s.workload, &RuntimeProfile::h200(), &s.view, 16);
            assert_eq!(
                c.lengths.len() + c.failed,
                lengths(s.view.from, s.view.to, 16, s.view.log_x).len()
            );
            assert_eq!(c.error.is_some(), c.failed > 0, "{}", p.id);
        }
    }
}
