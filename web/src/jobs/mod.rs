//! The page's jobs: what runs when an input changes, and where.
//!
//! Four jobs follow the page's state ([`AppState`]) and the runtime of the
//! calibration profile:
//!
//! - the estimate at the chosen length (the breakdown, the chart's marker);
//! - the curve (every length of the chart's range);
//! - the GPU table (per-GPU searches, after the estimate);
//! - the URL (the address bar, debounced).
//!
//! Each job depends on a key of the state ([`curve_key`], [`point_key`],
//! [`fit_key`], [`url_key`]): the page keeps a memo of each, and a job runs
//! again only when its key changes ([`jobs_for_change`] says which run for a
//! change). Each run takes a [`Ticket`] from its job's [`Generation`]; a
//! run whose ticket is no longer current (a newer input started another)
//! is not applied. The decisions here are plain functions, tested natively;
//! `run` (wasm32) wires them to signals, timers and workers.

use crate::gpu_rows::{fewest_on, FewestPeaks, FitRow, PeaksSearch, RowSearch};
use crate::state::{AppState, View};
use headroom_core::arch::Architecture;
use headroom_core::gpus::CATALOG;
use headroom_core::workload::{InferenceKind, Mode, Workload};
use headroom_core::{Bytes, RuntimeProfile};

#[cfg(target_arch = "wasm32")]
pub mod run;

/// The first curve is computed before the page is first drawn when its
/// points should take at most this long (judged by the first point);
/// otherwise it comes in the background with its progress shown.
pub const SYNC_FIRST_CURVE_MS: f64 = 250.0;

/// The estimate at the chosen length of a generation of more new tokens
/// than this (and its GPU table) is computed in a worker, so that a long
/// one (a million new tokens replays for seconds) never freezes the page.
pub const SYNC_POINT_MAX_DECODE_STEPS: u32 = 2048;

/// A job whose replay [`replay_cost`] puts above this many microseconds
/// is computed off the page's thread: its estimate, its GPU table and
/// every point of its curve go to workers. (The presets' default jobs cost
/// well under a tenth of it; a custom architecture of a thousand layers, a
/// long generation or a long recycling fold costs more.)
pub const SYNC_MAX_COST_US: f64 = 50_000.0;

/// A task of the GPU table's computation on the page's thread holds it
/// about this long at most (plus one estimate), then hands it back.
pub const FIT_TASK_MS: f64 = 30.0;

/// The GPU table's first task waits this long, so that a burst of input
/// changes starts one table.
pub const FIT_FIRST_DELAY_MS: u64 = 60;

/// The address bar follows the state this long after the last change
/// (browsers throttle history calls).
pub const URL_DELAY_MS: u64 = 250;

/// What the curve depends on but the runtime: the model, the workload at
/// length 0 (the chosen length only moves the marker), and the axis range.
pub type CurveKey = (Architecture, Workload, View);

/// What the estimate at the chosen length depends on but the runtime.
pub type PointKey = (Architecture, Workload);

/// What the GPU table depends on but the runtime and the estimate: the
/// model, the workload and the fragmentation margin.
pub type FitKey = (Architecture, Workload, u32);

/// The curve's key of `s`.
pub fn curve_key(s: &AppState) -> CurveKey {
    (
        s.model.arch.clone(),
        s.workload.with_length(s.vision(), 0),
        s.view.clone(),
    )
}

/// The chosen-length estimate's key of `s`.
pub fn point_key(s: &AppState) -> PointKey {
    (s.model.arch.clone(), s.workload.clone())
}

/// The GPU table's key of `s`.
pub fn fit_key(s: &AppState) -> FitKey {
    (s.model.arch.clone(), s.workload.clone(), s.margin_pct)
}

/// The URL's key of `s`: its query.
pub fn url_key(s: &AppState) -> String {
    s.to_query()
}

/// Which jobs run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Jobs {
    /// The curve is computed again.
    pub curve: bool,
    /// The estimate at the chosen length is computed again.
    pub point: bool,
    /// The GPU table is computed again (it also runs when a new estimate
    /// at the chosen length lands).
    pub fit: bool,
    /// The URL is written again.
    pub url: bool,
}

/// The jobs that a change of the state from `before` to `after` starts;
/// `runtime_changed` when the calibration profile's runtime changed too.
/// (Moving the GPU lines or the theme only redraws the chart.)
pub fn jobs_for_change(before: &AppState, after: &AppState, runtime_changed: bool) -> Jobs {
    Jobs {
        curve: runtime_changed || curve_key(before) != curve_key(after),
        point: runtime_changed || point_key(before) != point_key(after),
        fit: runtime_changed || fit_key(before) != fit_key(after),
        url: url_key(before) != url_key(after),
    }
}

/// About how long one replay of `w` on `arch` takes natively, in
/// microseconds, erring long: the replay's time follows how many layers it
/// passes through (not how large they are). Measured with the replay's
/// shortcuts on (training stops at its steady state after about three
/// steps; a decode step replays one layer in full and the others' caches):
/// a layer's forward pass costs up to 20 µs (a decoder's 30), its training
/// step up to 200 µs, a decode step 1.5 µs per layer, an ESMFold block
/// 20 µs per recycle (it only folds); mixtures of experts and sharded jobs
/// about twice as much.
pub fn replay_cost(arch: &Architecture, w: &Workload) -> f64 {
    let training = w.mode == Mode::Training;
    let per_layer = |forward: f64| if training { 200.0 } else { forward };
    let generates = !training && w.inference.kind == InferenceKind::Generate;
    let cost = match arch {
        Architecture::Decoder(d) => {
            let layers = f64::from(d.num_layers) * if d.moe.is_some() { 2.0 } else { 1.0 };
            let decode = if generates {
                layers * f64::from(w.inference.new_tokens) * 1.5
            } else {
                0.0
            };
            layers * per_layer(30.0) + decode
        }
        Architecture::Encoder(e) => f64::from(e.num_layers) * per_layer(20.0),
        Architecture::Vit(v) => f64::from(v.num_layers) * per_layer(20.0),
        Architecture::EsmFold(f) => {
            let recycles = w.esmfold.num_recycles.unwrap_or(f.max_recycles);
            let trunk = f64::from(f.trunk_blocks) * (1.0 + f64::from(recycles));
            (f64::from(f.stem.num_layers) + trunk + f64::from(f.structure_blocks)) * 20.0
        }
        Architecture::Cnn(headroom_core::arch::CnnArch::ResNet { blocks, .. }) => {
            blocks.iter().map(|&b| f64::from(b)).sum::<f64>() * per_layer(20.0)
        }
        Architecture::Cnn(_) => 17.0 * per_layer(20.0),
    };
    let sharded = if w.parallel.is_single() { 1.0 } else { 2.0 };
    cost * sharded
}

/// A job too slow to replay on the page's thread: a generation of more
/// than [`SYNC_POINT_MAX_DECODE_STEPS`] new tokens (a million take
/// seconds), or any job whose [`replay_cost`] passes [`SYNC_MAX_COST_US`]
/// (a custom model of a thousand layers). Its estimate, GPU table and
/// curve come from workers.
pub fn is_slow(arch: &Architecture, w: &Workload) -> bool {
    let long_generation = w.mode == Mode::Inference
        && w.inference.kind == InferenceKind::Generate
        && w.inference.new_tokens > SYNC_POINT_MAX_DECODE_STEPS;
    long_generation || replay_cost(arch, w) > SYNC_MAX_COST_US
}

/// Whether the first curve is computed before the first paint, given how
/// long its first point took and how many points it has.
pub fn first_curve_before_paint(first_point_ms: f64, points: usize) -> bool {
    first_point_ms * points as f64 <= SYNC_FIRST_CURVE_MS
}

/// Whether the page computes a curve for the current inputs: always, but
/// on the page's first run when the curve computed before the first paint
/// is for them.
pub fn curve_needed(first_run: bool, on_hand_is_current: bool) -> bool {
    !(first_run && on_hand_is_current)
}

/// Where the estimate at the chosen length comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointPlan {
    /// The estimate computed before the first paint stands.
    Keep,
    /// Computed on the page's thread, at once.
    Here,
    /// Computed by a worker of its own; the breakdown says it is coming.
    Worker,
}

/// The plan for the estimate of `w`; `first_run` on the page's first run,
/// `computed_before_paint` when a quick first estimate was computed before
/// the first paint (a slow one, a shared link to a long generation, is not).
pub fn point_plan(
    first_run: bool,
    computed_before_paint: bool,
    arch: &Architecture,
    w: &Workload,
) -> PointPlan {
    if first_run && computed_before_paint {
        PointPlan::Keep
    } else if is_slow(arch, w) {
        PointPlan::Worker
    } else {
        PointPlan::Here
    }
}

/// Where the GPU table comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitPlan {
    /// It needs the estimate at the chosen length, still being computed:
    /// it runs when that lands.
    WaitForPoint,
    /// A few estimates per task on the page's thread ([`FitTable`]).
    Steps,
    /// A worker of its own (the page's thread if no worker answers).
    Worker,
}

/// The plan for the GPU table of `w` on `arch`.
pub fn fit_plan(point_pending: bool, arch: &Architecture, w: &Workload) -> FitPlan {
    if point_pending {
        FitPlan::WaitForPoint
    } else if is_slow(arch, w) {
        FitPlan::Worker
    } else {
        FitPlan::Steps
    }
}

/// Numbers the runs of one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Generation(u64);

/// A run of a job: its result is applied only while it is current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

impl Generation {
    /// Starts a run, superseding every earlier one.
    pub fn start(&mut self) -> Ticket {
        self.0 += 1;
        Ticket(self.0)
    }

    /// Whether `ticket` is the latest run (its result is wanted).
    pub fn is_current(&self, ticket: Ticket) -> bool {
        self.0 == ticket.0
    }
}

/// Whether a step of [`FitTable::advance`] finished the table.
#[derive(Clone, Debug, PartialEq)]
pub enum FitProgress {
    /// Every catalog GPU's row.
    Done(Vec<FitRow>),
    /// Rows are still to come.
    More,
}

/// The GPU table computed one estimate at a time, so that the page's
/// thread can hand control back between tasks.
pub struct FitTable {
    arch: Architecture,
    workload: Workload,
    runtime: RuntimeProfile,
    peak: Option<Bytes>,
    margin_pct: u32,
    /// One rank's peaks per strategy and GPU count, searched first.
    peaks_search: PeaksSearch,
    /// Those peaks, once in (each row's fewest cards).
    peaks: Option<FewestPeaks>,
    rows: Vec<FitRow>,
    /// The row being searched.
    search: Option<RowSearch>,
}

impl FitTable {
    /// The table of `arch` and `workload` for the estimate's `peak` (the
    /// reservation) and the margin.
    pub fn new(
        arch: Architecture,
        workload: Workload,
        runtime: RuntimeProfile,
        peak: Option<Bytes>,
        margin_pct: u32,
    ) -> FitTable {
        FitTable {
            peaks_search: PeaksSearch::new(&arch, &workload, &runtime, margin_pct),
            peaks: None,
            arch,
            workload,
            runtime,
            peak,
            margin_pct,
            rows: Vec::new(),
            search: None,
        }
    }

    /// The model, workload and runtime the table is for.
    pub fn inputs(&self) -> (&Architecture, &Workload, &RuntimeProfile) {
        (&self.arch, &self.workload, &self.runtime)
    }

    /// The estimate's driver-level peak and the margin.
    pub fn peak_and_margin(&self) -> (Option<Bytes>, u32) {
        (self.peak, self.margin_pct)
    }

    /// Runs one estimate at a time while `go_on()` says so: first one
    /// rank's peaks per strategy and GPU count, then each card's row; the
    /// table once every catalog GPU's row is in.
    pub fn advance(&mut self, mut go_on: impl FnMut() -> bool) -> FitProgress {
        while go_on() {
            let Some(peaks) = &self.peaks else {
                self.peaks = self
                    .peaks_search
                    .step(&self.arch, &self.workload, &self.runtime);
                continue;
            };
            let Some(gpu) = CATALOG.get(self.rows.len()) else {
                return FitProgress::Done(std::mem::take(&mut self.rows));
            };
            let (arch, workload, runtime) = (&self.arch, &self.workload, &self.runtime);
            let search = self.search.get_or_insert_with(|| {
                RowSearch::new(gpu, arch, workload, runtime, self.peak, self.margin_pct)
            });
            if let Some(mut row) = search.step(arch, workload, runtime) {
                row.fewest = fewest_on(peaks, gpu, arch, workload, runtime, self.margin_pct);
                row.one_card_when_alone(workload.parallel.is_single());
                self.search = None;
                self.rows.push(row);
            }
        }
        FitProgress::More
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::presets;

    fn llama() -> AppState {
        AppState::for_model(presets::find("llama-3.2-1b").unwrap().model())
    }

    #[track_caller]
    fn check(change: impl FnOnce(&mut AppState), expect: Jobs) {
        let before = llama();
        let mut after = before.clone();
        change(&mut after);
        assert_eq!(jobs_for_change(&before, &after, false), expect);
    }

    const NONE: Jobs = Jobs {
        curve: false,
        point: false,
        fit: false,
        url: false,
    };
    const ALL: Jobs = Jobs {
        curve: true,
        point: true,
        fit: true,
        url: true,
    };

    /// Each input starts the jobs that depend on it, and only those.
    #[test]
    fn each_input_change_starts_its_jobs() {
        // The chosen length moves the marker: no new curve.
        check(
            |s| s.workload.seq_len = 777,
            Jobs {
                curve: false,
                ..ALL
            },
        );
        // A workload field changes every length.
        check(|s| s.workload.batch = 3, ALL);
        check(|s| s.workload.inference.new_tokens = 4096, ALL);
        // The axis: the curve only.
        for change in [
            (|s: &mut AppState| s.view.log_x = !s.view.log_x) as fn(&mut AppState),
            |s| s.view.to /= 2,
            |s| s.view.from += 1,
        ] {
            check(
                change,
                Jobs {
                    curve: true,
                    url: true,
                    ..NONE
                },
            );
        }
        // The margin: the table only.
        check(
            |s| s.margin_pct += 5,
            Jobs {
                fit: true,
                url: true,
                ..NONE
            },
        );
        // GPU lines are drawn from the curve on hand.
        check(
            |s| {
                s.gpus.pop();
            },
            Jobs { url: true, ..NONE },
        );
        // Another model: everything.
        check(|s| s.set_model(presets::find("gpt2").unwrap().model()), ALL);
        check(|_| {}, NONE);
        // A profile with another runtime: every estimate.
        let s = llama();
        let mut other = s.clone();
        other.profile = "loaded".into();
        assert_eq!(jobs_for_change(&s, &other, true), ALL);
        assert_eq!(jobs_for_change(&s, &s, true), Jobs { url: false, ..ALL });
    }

    /// A long generation's estimate and table go to a worker; a quick one's
    /// are computed here; the estimate before the first paint stands.
    #[test]
    fn long_generations_go_to_a_worker() {
        let s = llama();
        let a = &s.model.arch;
        let mut w = s.workload;
        assert!(!is_slow(a, &w));
        assert_eq!(point_plan(true, true, a, &w), PointPlan::Keep);
        assert_eq!(point_plan(false, true, a, &w), PointPlan::Here);
        assert_eq!(fit_plan(false, a, &w), FitPlan::Steps);
        assert_eq!(fit_plan(true, a, &w), FitPlan::WaitForPoint);
        w.inference.new_tokens = SYNC_POINT_MAX_DECODE_STEPS;
        assert!(!is_slow(a, &w));
        w.inference.new_tokens = SYNC_POINT_MAX_DECODE_STEPS + 1;
        assert!(is_slow(a, &w));
        // A shared link to a long generation: the first estimate comes
        // from a worker after the first paint.
        assert_eq!(point_plan(true, false, a, &w), PointPlan::Worker);
        assert_eq!(point_plan(false, true, a, &w), PointPlan::Worker);
        assert_eq!(fit_plan(false, a, &w), FitPlan::Worker);
        assert_eq!(fit_plan(true, a, &w), FitPlan::WaitForPoint);
        // One forward pass or training runs no decode step.
        let mut forward = w.clone();
        forward.inference.kind = InferenceKind::Forward;
        assert!(!is_slow(a, &forward));
        let mut training = w;
        training.mode = Mode::Training;
        assert!(!is_slow(a, &training));
    }

    /// Every preset's own job, trained or generating a few hundred tokens,
    /// is computed on the page's thread; a custom model of a thousand
    /// layers, a long generation of a deep model or a long fold is not.
    #[test]
    fn huge_jobs_go_to_workers_and_the_presets_stay_here() {
        use headroom_core::arch::Architecture;
        for p in presets::all() {
            let s = AppState::for_model(p.model());
            assert!(!is_slow(&p.arch, &s.workload), "{}", p.id);
            let mut w = s.workload.clone();
            w.mode = Mode::Training;
            w.training.steps = 1000;
            assert!(!is_slow(&p.arch, &w), "{} training", p.id);
        }
        let s = llama();
        let mut w = s.workload.clone();
        w.inference.new_tokens = 1024;
        assert!(!is_slow(&s.model.arch, &w));
        let mut deep = s.model.arch.clone();
        let Architecture::Decoder(d) = &mut deep else {
            panic!("a decoder")
        };
        d.num_layers = 1024;
        assert!(is_slow(&deep, &s.workload));
        w.mode = Mode::Training;
        assert!(is_slow(&deep, &w));
        let big = presets::find("llama-3.1-405b").unwrap();
        let mut w = AppState::for_model(big.model()).workload;
        w.inference.new_tokens = 1024;
        assert!(is_slow(&big.arch, &w));
        let fold = presets::find("esmfold-v1").unwrap();
        let mut w = AppState::for_model(fold.model()).workload;
        assert!(!is_slow(&fold.arch, &w));
        w.esmfold.num_recycles = Some(64);
        assert!(is_slow(&fold.arch, &w));
    }

    #[test]
    fn a_quick_first_curve_is_drawn_with_the_first_paint() {
        assert!(first_curve_before_paint(0.5, 256));
        assert!(!first_curve_before_paint(1.0, 256));
        assert!(!curve_needed(true, true));
        assert!(curve_needed(true, false));
        assert!(curve_needed(false, true));
    }

    /// Only the latest run of a job is applied: a superseded one's result
    /// is dropped, whatever order the results come in.
    #[test]
    fn a_superseded_run_is_not_applied() {
        let mut generation = Generation::default();
        let mut shown = None;
        let first = generation.start();
        let second = generation.start();
        for (ticket, value) in [(second, "second"), (first, "first")] {
            if generation.is_current(ticket) {
                shown = Some(value);
            }
        }
        assert_eq!(shown, Some("second"));
        // A burst of URL changes: only the last one's timer writes.
        let tickets: Vec<Ticket> = (0..5).map(|_| generation.start()).collect();
        let written: Vec<usize> = (0..tickets.len())
            .filter(|&i| generation.is_current(tickets[i]))
            .collect();
        assert_eq!(written, vec![4]);
    }

    /// The table computed a few estimates per task is the table computed
    /// at once, and a task that may run no estimate makes no progress.
    #[test]
    fn the_table_in_small_tasks_is_the_whole_table() {
        let s = AppState::for_model(presets::find("gpt2").unwrap().model());
        table_in_small_tasks(&s);
        // A Llama in training on 8 GPUs with FSDP2: each card's fewest
        // cards per strategy, computed a few estimates per task.
        let mut s = llama();
        s.workload.mode = Mode::Training;
        s.workload.seq_len = 1024;
        s.workload.training.precision = headroom_core::workload::Precision::Bf16;
        s.workload.parallel.strategy = headroom_core::parallel::Strategy::Fsdp2;
        s.workload.parallel.world_size = 8;
        let rows = table_in_small_tasks(&s);
        assert!(rows.iter().all(|r| r.fewest.len() == 3), "{rows:?}");
    }

    fn table_in_small_tasks(s: &AppState) -> Vec<FitRow> {
        let rt = RuntimeProfile::h200();
        let peak = Some(Bytes(3_000_000_000));
        let whole = crate::gpu_rows::rows(&s.model.arch, &s.workload, &rt, peak, 10);
        let mut table = FitTable::new(
            s.model.arch.clone(),
            s.workload.clone(),
            rt.clone(),
            peak,
            10,
        );
        assert_eq!(table.advance(|| false), FitProgress::More);
        let mut tasks = 0;
        let rows = loop {
            tasks += 1;
            let mut budget = 7;
            let step = table.advance(|| {
                budget -= 1;
                budget >= 0
            });
            if let FitProgress::Done(rows) = step {
                break rows;
            }
        };
        assert!(tasks > CATALOG.len() / 7, "{tasks} tasks");
        assert_eq!(rows, whole);
        rows
    }
}
