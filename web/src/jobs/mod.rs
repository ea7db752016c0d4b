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

use crate::fit::{fewest_for, FewestPeaks, FitRow, PeaksSearch, RowSearch};
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

/// A long generation replays every decode step (a million new tokens take
/// seconds): its estimate and GPU table come from a worker.
pub fn is_slow(w: &Workload) -> bool {
    w.mode == Mode::Inference
        && w.inference.kind == InferenceKind::Generate
        && w.inference.new_tokens > SYNC_POINT_MAX_DECODE_STEPS
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
pub fn point_plan(first_run: bool, computed_before_paint: bool, w: &Workload) -> PointPlan {
    if first_run && computed_before_paint {
        PointPlan::Keep
    } else if is_slow(w) {
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

/// The plan for the GPU table of `w`.
pub fn fit_plan(point_pending: bool, w: &Workload) -> FitPlan {
    if point_pending {
        FitPlan::WaitForPoint
    } else if is_slow(w) {
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
            peaks_search: PeaksSearch::new(&arch, &workload, margin_pct),
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
            let search = self
                .search
                .get_or_insert_with(|| RowSearch::new(gpu, &self.arch, self.peak, self.margin_pct));
            if let Some(mut row) = search.step(&self.arch, &self.workload, &self.runtime) {
                row.fewest = fewest_for(peaks, gpu, self.margin_pct);
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
        let mut w = llama().workload;
        assert!(!is_slow(&w));
        assert_eq!(point_plan(true, true, &w), PointPlan::Keep);
        assert_eq!(point_plan(false, true, &w), PointPlan::Here);
        assert_eq!(fit_plan(false, &w), FitPlan::Steps);
        assert_eq!(fit_plan(true, &w), FitPlan::WaitForPoint);
        w.inference.new_tokens = SYNC_POINT_MAX_DECODE_STEPS;
        assert!(!is_slow(&w));
        w.inference.new_tokens = SYNC_POINT_MAX_DECODE_STEPS + 1;
        assert!(is_slow(&w));
        // A shared link to a long generation: the first estimate comes
        // from a worker after the first paint.
        assert_eq!(point_plan(true, false, &w), PointPlan::Worker);
        assert_eq!(point_plan(false, true, &w), PointPlan::Worker);
        assert_eq!(fit_plan(false, &w), FitPlan::Worker);
        assert_eq!(fit_plan(true, &w), FitPlan::WaitForPoint);
        // One forward pass or training runs no decode step.
        let mut forward = w.clone();
        forward.inference.kind = InferenceKind::Forward;
        assert!(!is_slow(&forward));
        let mut training = w;
        training.mode = Mode::Training;
        assert!(!is_slow(&training));
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
        let whole = crate::fit::rows(&s.model.arch, &s.workload, &rt, peak, 10);
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
