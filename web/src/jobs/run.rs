//! The jobs on the page (wasm32): effects that follow the keys of
//! [`super`], run each job where its plan says, and apply a run's result
//! only while its ticket is current.

use super::{
    curve_needed, first_curve_before_paint, fit_plan, is_slow, point_plan, CurveKey, FitPlan,
    FitProgress, FitTable, Generation, PointPlan, Ticket, FIT_FIRST_DELAY_MS, FIT_TASK_MS,
    URL_DELAY_MS,
};
use crate::app::context::{page_url, PageContext};
use crate::app::perf;
use crate::curve::{view_lengths, CurveData};
use crate::defaults::CURVE_POINTS;
use crate::state::AppState;
use headroom_core::estimate::{estimate, Estimate};
use headroom_core::RuntimeProfile;
use leptos::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The runs of one job on the page.
#[derive(Clone, Copy)]
struct Runs(StoredValue<Generation>);

impl Runs {
    fn new() -> Runs {
        Runs(StoredValue::new(Generation::default()))
    }

    /// Starts a run, superseding the earlier ones.
    fn start(self) -> Ticket {
        // Once the page is gone no run is wanted, whatever its ticket.
        self.0
            .try_update_value(Generation::start)
            .unwrap_or(Ticket(0))
    }

    /// Whether `ticket`'s result is still wanted (false once the page is gone).
    fn wanted(self, ticket: Ticket) -> bool {
        self.0.try_with_value(|g| g.is_current(ticket)) == Some(true)
    }
}

/// The estimate at the chosen length before the first paint, when it is
/// quick; a slow one is pending (it comes from a worker after the paint).
pub fn first_point(
    state: RwSignal<AppState>,
    runtime: Memo<RuntimeProfile>,
) -> (RwSignal<Result<Estimate, String>>, RwSignal<bool>) {
    let slow = state.with_untracked(|s| is_slow(&s.model.arch, &s.workload));
    let point = if slow {
        Err(String::new())
    } else {
        state.with_untracked(|s| {
            estimate(&s.model.arch, &s.workload, &runtime.get_untracked())
                .map_err(|e| e.to_string())
        })
    };
    (RwSignal::new(point), RwSignal::new(slow))
}

/// The first curve before the first paint, when it is quick (most take
/// tens of ms, judged by its first point; a slow job's is not even tried);
/// `curve_for` says whether it was.
#[allow(clippy::type_complexity)]
pub fn first_curve(
    curve_key: Memo<CurveKey>,
    runtime: Memo<RuntimeProfile>,
) -> (
    RwSignal<CurveData>,
    StoredValue<Option<(CurveKey, RuntimeProfile)>>,
) {
    let rt = runtime.get_untracked();
    let first = curve_key.with_untracked(|(arch, w, view)| {
        if is_slow(arch, w) {
            return None;
        }
        let lengths = view_lengths(view, CURVE_POINTS);
        let started = perf::now();
        let _ = crate::curve::estimate_lengths(arch, w, &rt, &lengths[..1.min(lengths.len())]);
        first_curve_before_paint(perf::now() - started, CURVE_POINTS)
            .then(|| CurveData::compute(arch, w, &rt, view, CURVE_POINTS))
    });
    let curve_for = first.is_some().then(|| (curve_key.get_untracked(), rt));
    (
        RwSignal::new(first.unwrap_or_default()),
        StoredValue::new(curve_for),
    )
}

/// Starts the page's jobs: each follows its key from now on.
pub fn start(page: PageContext) {
    point_job(page);
    crate::workers::start();
    curve_job(page);
    fit_job(page);
    url_job(page);
}

/// The estimate at the chosen length: at once on this thread, or from a
/// worker of its own for a long generation (the breakdown says it is
/// coming meanwhile).
fn point_job(page: PageContext) {
    let PageContext {
        state,
        runtime,
        point,
        point_pending,
        ..
    } = page;
    let computed_before_paint = !point_pending.get_untracked();
    let point_key = Memo::new(move |_| state.with(super::point_key));
    let runs = Runs::new();
    Effect::new(move |previous: Option<()>| {
        let rt = runtime.get();
        let (arch, w) = point_key.get();
        let ticket = runs.start();
        let land = move |result: Result<Estimate, String>| {
            point.set(result);
            if point_pending.get_untracked() {
                point_pending.set(false);
            }
        };
        match point_plan(previous.is_none(), computed_before_paint, &arch, &w) {
            PointPlan::Keep => {}
            PointPlan::Here => {
                let length = w.length(arch.is_vision());
                land(crate::curve::estimate_lengths(&arch, &w, &rt, &[length]).remove(0))
            }
            PointPlan::Worker => {
                if !point_pending.get_untracked() {
                    point_pending.set(true);
                }
                leptos::task::spawn_local(async move {
                    let wanted = move || runs.wanted(ticket);
                    let length = w.length(arch.is_vision());
                    let answer = crate::workers::estimate_one(&arch, &w, &rt, length, wanted).await;
                    if let Some(result) = answer {
                        if wanted() {
                            land(result);
                        }
                    }
                });
            }
        }
    });
}

/// The curve: shared with the workers (`workers::curve`), yielding to the
/// browser while this thread computes its share, and landing when the last
/// share is in, unless a newer change has started another.
fn curve_job(page: PageContext) {
    let PageContext {
        state,
        runtime,
        curve,
        curve_progress,
        curve_refining,
        curve_for,
        curve_key,
        ..
    } = page;
    let runs = Runs::new();
    Effect::new(move |previous: Option<()>| {
        let rt = runtime.get();
        let key = curve_key.get();
        // The first run finds the curve computed before the first paint,
        // unless something changed in between.
        let on_hand =
            curve_for.with_value(|f| f.as_ref().is_some_and(|(k, r)| *k == key && *r == rt));
        if !curve_needed(previous.is_none(), on_hand) {
            return;
        }
        // A slow curve in flight (its progress is showing) is dropped: its
        // workers' shares too, so this one does not queue behind them.
        if curve_progress.get_untracked().is_some() {
            crate::workers::cancel_busy();
        }
        let ticket = runs.start();
        let lengths = view_lengths(&key.2, CURVE_POINTS);
        let chosen = state.with_untracked(AppState::length);
        let wanted = move || runs.wanted(ticket);
        let progress = move |p: Option<f64>| {
            if wanted() {
                curve_progress.try_set(p);
            }
        };
        // Every point drawn is exact and for the current inputs: first the
        // chosen length's and a few spread over the range, then all.
        let (arch, w, _) = key.clone();
        let landed_for = (key, rt.clone());
        let land = move |data: CurveData, complete: bool| {
            if wanted() {
                curve_for.set_value(Some(landed_for.clone()));
                curve_refining.try_set(!complete);
                curve.try_set(data);
            }
        };
        let show = {
            let land = land.clone();
            move |data: CurveData| land(data, false)
        };
        let first = crate::workers::FirstDraw {
            chosen,
            show: &show,
        };
        // The first points are computed here, in the input's own task, not
        // queued behind the page's other updates.
        let begun = crate::workers::can_begin_at_once(&arch, &w)
            .then(|| crate::workers::begin(&arch, &w, &rt, &lengths, Some(first)));
        leptos::task::spawn_local(async move {
            let data = match begun {
                Some(begun) => {
                    crate::workers::finish(begun, &arch, &w, &rt, wanted, progress).await
                }
                None => {
                    let first = crate::workers::FirstDraw {
                        chosen,
                        show: &show,
                    };
                    crate::workers::curve(&arch, &w, &rt, &lengths, Some(first), wanted, progress)
                        .await
                }
            };
            crate::app::perf::reached(crate::app::perf::Milestone::CurveLanded);
            land(data, true);
        });
    });
}

/// The GPU table runs dozens of estimates per GPU: it follows the chart a
/// moment after the last change, a few estimates per task, so it never
/// delays a redraw or blocks the page; a long generation's comes from a
/// worker of its own.
fn fit_job(page: PageContext) {
    let PageContext {
        state,
        runtime,
        point,
        point_pending,
        fit,
        fit_pending,
        curve_refining,
        ..
    } = page;
    let fit_key = Memo::new(move |_| state.with(super::fit_key));
    let runs = Runs::new();
    Effect::new(move |_| {
        let (arch, w, margin) = fit_key.get();
        let rt = runtime.get();
        let ticket = runs.start();
        // The table needs the estimate at the chosen length: it waits for
        // one still being computed (this effect runs again when it lands).
        let plan = fit_plan(point_pending.get(), &arch, &w);
        fit_pending.set(true);
        if plan == FitPlan::WaitForPoint {
            return;
        }
        let peak = point.with(|p| p.as_ref().ok().map(|e| e.driver_peak));
        let table = FitTable::new(arch, w, rt, peak, margin);
        let wanted = move || runs.wanted(ticket);
        let out = move |rows: Vec<crate::gpu_rows::FitRow>| {
            fit.try_set(Some(rows));
            fit_pending.try_set(false);
        };
        if plan == FitPlan::Steps {
            fit_steps(
                Rc::new(RefCell::new(table)),
                wanted,
                curve_refining,
                out,
                true,
            );
            return;
        }
        // Where no worker answers, this thread computes it.
        leptos::task::spawn_local(async move {
            let (arch, w, rt) = table.inputs();
            let (peak, margin) = table.peak_and_margin();
            match crate::workers::fit_rows(arch, w, rt, peak, margin, wanted).await {
                Some(Ok(rows)) if wanted() => out(rows),
                Some(Err(_)) if wanted() => fit_steps(
                    Rc::new(RefCell::new(table)),
                    wanted,
                    curve_refining,
                    out,
                    true,
                ),
                _ => {}
            }
        });
    });
}

/// Runs the table's estimates for up to [`FIT_TASK_MS`] in a task of its
/// own, then schedules the next task; stops when no longer `wanted`. While
/// the curve is being refined, its tasks wait: the chart comes first.
fn fit_steps(
    table: Rc<RefCell<FitTable>>,
    wanted: impl Fn() -> bool + Copy + 'static,
    curve_refining: RwSignal<bool>,
    out: impl Fn(Vec<crate::gpu_rows::FitRow>) + Copy + 'static,
    first: bool,
) {
    let delay = if first { FIT_FIRST_DELAY_MS } else { 0 };
    set_timeout(
        move || {
            if curve_refining.try_get_untracked() == Some(true) && wanted() {
                return fit_steps(table, wanted, curve_refining, out, true);
            }
            let start = perf::now();
            let progress = table
                .borrow_mut()
                .advance(|| wanted() && perf::now() - start < FIT_TASK_MS);
            if !wanted() {
                return;
            }
            match progress {
                FitProgress::Done(rows) => out(rows),
                FitProgress::More => fit_steps(table, wanted, curve_refining, out, false),
            }
        },
        Duration::from_millis(delay),
    );
}

/// The URL follows the state, [`URL_DELAY_MS`] after the last change.
fn url_job(page: PageContext) {
    let state = page.state;
    let runs = Runs::new();
    Effect::new(move |_| {
        let q = state.with(super::url_key);
        let ticket = runs.start();
        set_timeout(
            move || {
                if !runs.wanted(ticket) {
                    return;
                }
                if let Ok(history) = window().history() {
                    let _ = history.replace_state_with_url(
                        &wasm_bindgen::JsValue::NULL,
                        "",
                        Some(&page_url(&q)),
                    );
                }
            },
            Duration::from_millis(URL_DELAY_MS),
        );
    });
}
