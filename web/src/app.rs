//! The Leptos page (wasm32 only). Signals hold [`AppState`]; memos call the
//! core; effects sync the canvas, the URL and the theme with the outside.

use crate::calib::{self, Profile};
use crate::chart::{self, ChartSpec, Layout, Theme};
use crate::curve::{bands, view_lengths, Band, CurveData};
use crate::defaults::{self, CURVE_POINTS, MAX_MARGIN_PCT};
use crate::export;
use crate::fit::{self, FitRow};
use crate::format;
use crate::query;
use crate::state::AppState;
use headroom_core::arch::{Dtype, Model};
use headroom_core::estimate::{estimate, Component, Estimate};
use headroom_core::gpus::CATALOG;
use headroom_core::presets;
use headroom_core::spec::parse_model;
use headroom_core::workload::{
    Attention, InferenceKind, LoadPath, Logits, Lora, Mode, Optimizer, Precision, Workload,
};
use headroom_core::RuntimeProfile;
use leptos::html;
use leptos::prelude::*;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use wasm_bindgen::JsCast;
use web_sys::{HtmlCanvasElement, HtmlInputElement};

/// Mounts the page on `<body>`, reading the state from the URL.
pub fn mount() {
    leptos::mount::mount_to_body(App);
}

/// Timing of input changes to finished chart redraws, read by the
/// performance test.
pub mod perf {
    use std::cell::{Cell, RefCell};

    thread_local! {
        static INPUT_AT: Cell<Option<f64>> = const { Cell::new(None) };
        static TIMINGS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
        static DRAWS: Cell<u32> = const { Cell::new(0) };
    }

    /// `performance.now()` in ms.
    pub fn now() -> f64 {
        web_sys::window()
            .and_then(|w| w.performance())
            .map_or(0.0, |p| p.now())
    }

    /// Called at the start of every input handler.
    pub fn input() {
        INPUT_AT.with(|c| c.set(Some(now())));
    }

    /// Called when the chart has been drawn.
    pub fn drawn() {
        DRAWS.with(|d| d.set(d.get() + 1));
        if let Some(start) = INPUT_AT.with(|c| c.take()) {
            let ms = now() - start;
            TIMINGS.with(|t| t.borrow_mut().push(ms));
        }
    }

    /// Chart draws since the page loaded.
    pub fn draws() -> u32 {
        DRAWS.with(Cell::get)
    }

    /// Input-to-redraw times recorded since the last call, ms.
    pub fn take() -> Vec<f64> {
        TIMINGS.with(|t| std::mem::take(&mut *t.borrow_mut()))
    }
}

thread_local! {
    static LAST_EXPORT: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// The last file exported (name and text; PNG exports hold the data URL).
pub fn last_export() -> Option<(String, String)> {
    LAST_EXPORT.with(|e| e.borrow().clone())
}

/// The theme the user picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ThemeChoice {
    Auto,
    Light,
    Dark,
}

impl ThemeChoice {
    fn name(self) -> &'static str {
        match self {
            ThemeChoice::Auto => "auto",
            ThemeChoice::Light => "light",
            ThemeChoice::Dark => "dark",
        }
    }
    fn next(self) -> ThemeChoice {
        match self {
            ThemeChoice::Auto => ThemeChoice::Light,
            ThemeChoice::Light => ThemeChoice::Dark,
            ThemeChoice::Dark => ThemeChoice::Auto,
        }
    }
    fn resolve(self) -> Theme {
        match self {
            ThemeChoice::Light => Theme::Light,
            ThemeChoice::Dark => Theme::Dark,
            ThemeChoice::Auto => {
                let dark = window()
                    .match_media("(prefers-color-scheme: dark)")
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.matches());
                if dark {
                    Theme::Dark
                } else {
                    Theme::Light
                }
            }
        }
    }
}

/// Signals shared by the page's parts.
#[derive(Clone, Copy)]
struct Ctx {
    state: RwSignal<AppState>,
    profiles: RwSignal<Vec<Profile>>,
    notes: RwSignal<Vec<String>>,
    theme: RwSignal<ThemeChoice>,
    runtime: Memo<RuntimeProfile>,
    profile: Memo<Profile>,
    curve: RwSignal<CurveData>,
    /// How far this thread is through a slow curve's computation (0 to 1).
    curve_progress: RwSignal<Option<f64>>,
    /// What the curve in `curve` was computed for (the key and runtime).
    curve_for: StoredValue<Option<(CurveKey, RuntimeProfile)>>,
    curve_key: Memo<CurveKey>,
    bands: Memo<Vec<Band>>,
    /// The estimate at the chosen length (the last one computed).
    point: RwSignal<Result<Estimate, String>>,
    /// A newer estimate at the chosen length is being computed.
    point_pending: RwSignal<bool>,
    measured: Memo<Vec<(u32, u64)>>,
    fit: RwSignal<Option<Vec<FitRow>>>,
    fit_pending: RwSignal<bool>,
}

/// Everything the main curve depends on but the runtime: the model, the
/// workload at length 0, and the axis range.
type CurveKey = (
    headroom_core::arch::Architecture,
    Workload,
    crate::state::View,
);

/// The first curve is computed before the page is first drawn when its 256
/// points should take at most this long (judged by the first point);
/// otherwise it comes in the background with progress shown.
const SYNC_FIRST_CURVE_MS: f64 = 250.0;

/// The estimate at the chosen length of a generation of more new tokens
/// than this is computed in a worker, so that a long one (a million new
/// tokens replays for seconds) never freezes the page.
const SYNC_POINT_MAX_DECODE_STEPS: u32 = 2048;

/// One computation of the fit table.
struct FitJob {
    arch: headroom_core::arch::Architecture,
    workload: Workload,
    runtime: RuntimeProfile,
    peak: Option<headroom_core::Bytes>,
    margin: u32,
    generation: StoredValue<u64>,
    mine: u64,
    rows: RefCell<Vec<FitRow>>,
    /// The row being searched.
    search: RefCell<Option<fit::RowSearch>>,
    out: RwSignal<Option<Vec<FitRow>>>,
    pending: RwSignal<bool>,
}

/// A task of the fit table's computation holds the page's thread about
/// this long at most (plus one estimate), then hands it back.
const FIT_TASK_MS: f64 = 30.0;

/// Runs the table's estimates for up to [`FIT_TASK_MS`] in a task of its
/// own, then schedules the next task; stops when a newer change has started
/// another job. The first task waits a little, so that a burst of input
/// changes starts one job.
fn fit_step(job: Rc<FitJob>, first: bool) {
    let delay = if first { 60 } else { 0 };
    set_timeout(
        move || {
            let start = perf::now();
            while perf::now() - start < FIT_TASK_MS {
                if job.generation.try_get_value() != Some(job.mine) {
                    return;
                }
                let i = job.rows.borrow().len();
                let Some(gpu) = CATALOG.get(i) else {
                    job.out.try_set(Some(job.rows.take()));
                    job.pending.try_set(false);
                    return;
                };
                let mut search = job.search.borrow_mut();
                let row = search
                    .get_or_insert_with(|| {
                        fit::RowSearch::new(gpu, &job.arch, job.peak, job.margin)
                    })
                    .step(&job.arch, &job.workload, &job.runtime);
                if let Some(row) = row {
                    *search = None;
                    job.rows.borrow_mut().push(row);
                }
            }
            fit_step(job, false);
        },
        Duration::from_millis(delay),
    );
}

impl Ctx {
    /// Applies a workload change after the core validates it; the error
    /// (naming the field and its range) is returned for inline display.
    fn apply(&self, f: impl FnOnce(&mut Workload)) -> Result<(), String> {
        perf::input();
        let mut w = self.state.with_untracked(|s| s.workload.clone());
        f(&mut w);
        w.validate().map_err(|e| e.to_string())?;
        self.state.update(|s| s.workload = w);
        Ok(())
    }

    fn update(&self, f: impl FnOnce(&mut AppState)) {
        perf::input();
        self.state.update(f);
    }

    /// Whether the curve on hand was computed for the current inputs (if
    /// not, a new one is being computed and will trigger another redraw).
    fn curve_is_current(&self) -> bool {
        self.curve.track();
        let key = self.curve_key.get();
        let rt = self.runtime.get();
        self.curve_for
            .with_value(|f| f.as_ref().is_some_and(|(k, r)| *k == key && *r == rt))
    }
}

fn location_query() -> String {
    let loc = window().location();
    let search = loc.search().unwrap_or_default();
    if search.len() > 1 {
        search
    } else {
        loc.hash().unwrap_or_default()
    }
}

fn page_url(query: &str) -> String {
    let loc = window().location();
    let base = format!(
        "{}{}",
        loc.origin().unwrap_or_default(),
        loc.pathname().unwrap_or_default()
    );
    if query.is_empty() {
        base
    } else {
        format!("{base}?{query}")
    }
}

fn stored_theme() -> ThemeChoice {
    let value = window()
        .local_storage()
        .ok()
        .flatten()
        .and_then(|s| s.get_item("headroom-theme").ok().flatten());
    match value.as_deref() {
        Some("light") => ThemeChoice::Light,
        Some("dark") => ThemeChoice::Dark,
        _ => ThemeChoice::Auto,
    }
}

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let profiles_list = calib::bundled();
    let ids: Vec<&str> = profiles_list.iter().map(|p| p.id.as_str()).collect();
    let (initial, notes) = AppState::from_query(&location_query(), &ids);
    let state = RwSignal::new(initial);
    let profiles = RwSignal::new(profiles_list);
    let notes = RwSignal::new(notes);
    let theme = RwSignal::new(stored_theme());

    let profile_id = Memo::new(move |_| state.with(|s| s.profile.clone()));
    let profile = Memo::new(move |_| {
        let id = profile_id.get();
        profiles.with(|ps| {
            ps.iter()
                .find(|p| p.id == id)
                .cloned()
                .unwrap_or_else(calib::builtin)
        })
    });
    let runtime = Memo::new(move |_| profile.with(|p| p.runtime.clone()));
    // The curve depends on everything but the chosen length.
    let curve_key = Memo::new(move |_| {
        state.with(|s| {
            (
                s.model.arch.clone(),
                s.workload.with_length(s.vision(), 0),
                s.view.clone(),
            )
        })
    });
    // The estimate at the chosen length.
    let point_key = Memo::new(move |_| state.with(|s| (s.model.arch.clone(), s.workload.clone())));
    // A long generation replays every decode step (a million new tokens
    // take seconds): its estimate comes from a worker, the others at once.
    let slow_job = |w: &Workload| {
        w.mode == Mode::Inference
            && w.inference.kind == InferenceKind::Generate
            && w.inference.new_tokens > SYNC_POINT_MAX_DECODE_STEPS
    };
    // A quick first estimate is there for the first paint; a slow one (a
    // shared link to a long generation) comes from a worker after it.
    let first_slow = point_key.with_untracked(|(_, w)| slow_job(w));
    let point = RwSignal::new(if first_slow {
        Err(String::new())
    } else {
        point_key.with_untracked(|(arch, w)| {
            estimate(arch, w, &runtime.get_untracked()).map_err(|e| e.to_string())
        })
    });
    let point_pending = RwSignal::new(first_slow);
    let point_generation = StoredValue::new(0u64);
    Effect::new(move |previous: Option<()>| {
        let rt = runtime.get();
        let (arch, w) = point_key.get();
        point_generation.update_value(|g| *g += 1);
        let mine = point_generation.get_value();
        if previous.is_none() && !first_slow {
            return;
        }
        let land = move |result: Result<Estimate, String>| {
            point.set(result);
            if point_pending.get_untracked() {
                point_pending.set(false);
            }
        };
        if !slow_job(&w) {
            land(estimate(&arch, &w, &rt).map_err(|e| e.to_string()));
            return;
        }
        if !point_pending.get_untracked() {
            point_pending.set(true);
        }
        leptos::task::spawn_local(async move {
            let wanted = move || point_generation.try_get_value() == Some(mine);
            let length = w.length(arch.is_vision());
            let answer = crate::workers::estimate_one(&arch, &w, &rt, length, wanted).await;
            if let Some(result) = answer {
                if wanted() {
                    land(result);
                }
            }
        });
    });
    // The first curve is computed here, before the workers exist, when it
    // is quick (most take tens of ms); later ones, and a slow first one (a
    // generation of thousands of tokens replays every decode step), are
    // shared with the workers (`workers::curve`), yield to the browser while
    // they run and land when the last share is in, unless a newer change
    // has started another.
    let first_curve = curve_key.with_untracked(|(arch, w, view)| {
        let rt = runtime.get_untracked();
        let lengths = view_lengths(view, CURVE_POINTS);
        let started = perf::now();
        let _ = crate::curve::estimate_lengths(arch, w, &rt, &lengths[..1.min(lengths.len())]);
        let per_point = perf::now() - started;
        (per_point * CURVE_POINTS as f64 <= SYNC_FIRST_CURVE_MS)
            .then(|| CurveData::compute(arch, w, &rt, view, CURVE_POINTS))
    });
    let curve_for = StoredValue::new(
        first_curve
            .is_some()
            .then(|| (curve_key.get_untracked(), runtime.get_untracked())),
    );
    let curve = RwSignal::new(first_curve.unwrap_or_default());
    crate::workers::start();
    let curve_generation = StoredValue::new(0u64);
    let curve_progress = RwSignal::new(None::<f64>);
    Effect::new(move |previous: Option<()>| {
        let rt = runtime.get();
        let (arch, w, view) = curve_key.get();
        // The first run finds the curve computed above, unless something
        // changed in between.
        let key = (arch, w, view);
        if previous.is_none()
            && curve_for.with_value(|f| f.as_ref().is_some_and(|(k, r)| *k == key && *r == rt))
        {
            return;
        }
        let (arch, w, view) = key;
        // A slow curve in flight (its progress is showing) is dropped: its
        // workers' shares too, so this one does not queue behind them.
        if curve_progress.get_untracked().is_some() {
            crate::workers::cancel_busy();
        }
        curve_generation.update_value(|g| *g += 1);
        let mine = curve_generation.get_value();
        let lengths = view_lengths(&view, CURVE_POINTS);
        leptos::task::spawn_local(async move {
            let wanted = move || curve_generation.try_get_value() == Some(mine);
            let progress = move |p: Option<f64>| {
                if wanted() {
                    curve_progress.try_set(p);
                }
            };
            let data = crate::workers::curve(&arch, &w, &rt, &lengths, wanted, progress).await;
            if curve_generation.try_get_value() == Some(mine) {
                curve_for.set_value(Some(((arch, w, view), rt)));
                curve.try_set(data);
            }
        });
    });
    let bands_memo = Memo::new(move |_| curve.with(bands));
    let measured = Memo::new(move |_| {
        let rt = runtime.get();
        let points = profile.with(|p| p.points.clone());
        state.with(|s| calib::matching(&points, &s.model, &s.workload, &rt))
    });
    let fit_rows = RwSignal::new(None::<Vec<FitRow>>);
    let fit_pending = RwSignal::new(true);
    let ctx = Ctx {
        state,
        profiles,
        notes,
        theme,
        runtime,
        profile,
        curve,
        curve_progress,
        curve_for,
        curve_key,
        bands: bands_memo,
        point,
        point_pending,
        measured,
        fit: fit_rows,
        fit_pending,
    };

    // The fit table runs dozens of estimates per GPU: it follows the chart
    // a moment after the last change, one GPU per task, so it never delays
    // a redraw or blocks the page.
    let fit_key = Memo::new(move |_| {
        state.with(|s| (s.model.arch.clone(), s.workload.clone(), s.margin_pct))
    });
    let generation = StoredValue::new(0u64);
    Effect::new(move |_| {
        let (arch, w, margin) = fit_key.get();
        let rt = runtime.get();
        generation.update_value(|g| *g += 1);
        // The table needs the estimate at the chosen length: it waits for
        // one still being computed (this effect runs again when it lands).
        if point_pending.get() {
            fit_pending.set(true);
            return;
        }
        let peak = point.with(|p| p.as_ref().ok().map(|e| e.driver_peak));
        let job = Rc::new(FitJob {
            arch,
            workload: w,
            runtime: rt,
            peak,
            margin,
            generation,
            mine: generation.get_value(),
            rows: RefCell::new(Vec::new()),
            search: RefCell::new(None),
            out: fit_rows,
            pending: fit_pending,
        });
        fit_pending.set(true);
        if !slow_job(&job.workload) {
            fit_step(job, true);
            return;
        }
        // A long generation's table (seconds to minutes of probes) comes
        // from a worker of its own; where none answers, from this thread.
        leptos::task::spawn_local(async move {
            let wanted = || job.generation.try_get_value() == Some(job.mine);
            let (arch, w, rt) = (&job.arch, &job.workload, &job.runtime);
            match crate::workers::fit_rows(arch, w, rt, job.peak, job.margin, wanted).await {
                Some(Ok(rows)) if wanted() => {
                    job.out.set(Some(rows));
                    job.pending.set(false);
                }
                Some(Err(_)) if wanted() => fit_step(job, true),
                _ => {}
            }
        });
    });

    // The URL follows the state (debounced: browsers throttle history calls).
    let url_generation = StoredValue::new(0u64);
    Effect::new(move |_| {
        let q = state.with(AppState::to_query);
        url_generation.update_value(|g| *g += 1);
        let mine = url_generation.get_value();
        set_timeout(
            move || {
                if url_generation.try_get_value() != Some(mine) {
                    return;
                }
                let url = page_url(&q);
                if let Ok(history) = window().history() {
                    let _ = history.replace_state_with_url(
                        &wasm_bindgen::JsValue::NULL,
                        "",
                        Some(&url),
                    );
                }
            },
            Duration::from_millis(250),
        );
    });

    Effect::new(move |_| {
        let choice = theme.get();
        if let Some(root) = document().document_element() {
            let _ = root.set_attribute("data-theme", choice.name());
        }
        if let Some(storage) = window().local_storage().ok().flatten() {
            let _ = storage.set_item("headroom-theme", choice.name());
        }
    });

    view! {
        <div class="page" data-testid="app">
            <Header ctx=ctx/>
            <main class="layout">
                <section class="controls" aria-label="Model and workload">
                    <ModelPanel ctx=ctx/>
                    <WorkloadPanel ctx=ctx/>
                    <CalibrationPanel ctx=ctx/>
                </section>
                <section class="results" aria-label="Results">
                    <ChartPanel ctx=ctx/>
                    <BreakdownPanel ctx=ctx/>
                    <FitPanel ctx=ctx/>
                </section>
            </main>
            <footer class="footer">
                "Every figure comes from headroom-core: a replay of the tensors PyTorch allocates through a model of its caching allocator, plus the CUDA context and libraries of the calibration profile. GB = 10"<sup>"9"</sup>" bytes."
            </footer>
        </div>
    }
}

#[component]
fn Header(ctx: Ctx) -> impl IntoView {
    let status = RwSignal::new(String::new());
    let link = Memo::new(move |_| page_url(&ctx.state.with(AppState::to_query)));
    let copy = move |_| {
        let url = link.get_untracked();
        let clipboard = window().navigator().clipboard();
        let promise = clipboard.write_text(&url);
        leptos::task::spawn_local(async move {
            let ok = wasm_bindgen_futures::JsFuture::from(promise).await.is_ok();
            status.set(if ok {
                "Link copied.".into()
            } else {
                "Could not reach the clipboard: copy the link from the box.".into()
            });
        });
    };
    let loaded_note = move || {
        (ctx.state.with(|s| s.profile == calib::LOADED_ID)).then(|| {
            view! {
                <p class="hint" data-testid="link-profile-note">
                    "The profile you loaded from a file is not part of the link; the link opens with the built-in profile."
                </p>
            }
        })
    };
    view! {
        <header class="header">
            <div class="brand">
                <h1>"headroom"</h1>
                <p class="tagline">"Peak GPU memory of a PyTorch job, before you run it"</p>
            </div>
            <div class="share">
                <label for="share-link" class="visually-hidden">"Link to this setup"</label>
                <input id="share-link" data-testid="share-link" type="text" readonly prop:value=move || link.get()/>
                <button type="button" data-testid="copy-link" on:click=copy>"Copy link"</button>
                <button
                    type="button"
                    data-testid="theme"
                    aria-label=move || format!("Theme: {} (change)", ctx.theme.get().name())
                    on:click=move |_| ctx.theme.update(|t| *t = t.next())
                >
                    {move || format!("Theme: {}", ctx.theme.get().name())}
                </button>
                <span class="status" role="status" data-testid="copy-status">{move || status.get()}</span>
            </div>
            {loaded_note}
            {move || {
                let notes = ctx.notes.get();
                (!notes.is_empty()).then(|| view! {
                    <div class="note" role="alert" data-testid="url-note">
                        <strong>"Parts of the link could not be read and use defaults:"</strong>
                        <ul>{notes.into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}</ul>
                        <button type="button" data-testid="dismiss-note" on:click=move |_| ctx.notes.set(Vec::new())>"Dismiss"</button>
                    </div>
                })
            }}
        </header>
    }
}

/// A labelled `<select>`.
fn select_field(
    id: &'static str,
    label: &'static str,
    options: Vec<(&'static str, &'static str)>,
    current: impl Fn() -> String + Send + Sync + 'static + Copy,
    on_pick: impl Fn(String) + 'static,
) -> impl IntoView {
    view! {
        <div class="field">
            <label for=id>{label}</label>
            <select id=id data-testid=id on:change=move |ev| on_pick(event_target_value(&ev))>
                {options
                    .into_iter()
                    .map(|(value, text)| {
                        view! { <option value=value prop:selected=move || current() == value>{text}</option> }
                    })
                    .collect_view()}
            </select>
        </div>
    }
}

/// A labelled number input with an inline error from the core's validation.
fn number_field(
    id: &'static str,
    label: &'static str,
    min: u64,
    max: u64,
    current: impl Fn() -> String + Send + Sync + 'static,
    on_set: impl Fn(&str) -> Result<(), String> + 'static,
) -> impl IntoView {
    let error = RwSignal::new(None::<String>);
    let err_id = format!("{id}-error");
    let err_id2 = err_id.clone();
    view! {
        <div class="field">
            <label for=id>{label}</label>
            <input
                id=id
                data-testid=id
                type="number"
                inputmode="numeric"
                min=min
                max=max
                prop:value=current
                aria-invalid=move || error.with(|e| e.is_some()).to_string()
                aria-describedby=err_id.clone()
                on:input=move |ev| {
                    let text = event_target_value(&ev);
                    error.set(on_set(text.trim()).err());
                }
            />
            <span class="error" id=err_id2 data-testid=format!("{id}-error") role="alert">
                {move || error.get()}
            </span>
        </div>
    }
}

fn parse_u32(field: &str, text: &str, min: u64, max: u64) -> Result<u32, String> {
    match text.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v as u32),
        _ => Err(format!(
            "`{field}`: `{text}` is not accepted; allowed: an integer from {min} to {max}"
        )),
    }
}

fn dtype_from(name: &str) -> Dtype {
    match name {
        "fp32" => Dtype::Fp32,
        "fp16" => Dtype::Fp16,
        "int8" => Dtype::Int8,
        "int4" => Dtype::Int4,
        _ => Dtype::Bf16,
    }
}

#[component]
fn ModelPanel(ctx: Ctx) -> impl IntoView {
    let search = RwSignal::new(String::new());
    let all = StoredValue::new(presets::all());
    let current_id = Memo::new(move |_| ctx.state.with(|s| s.model.id.clone()));
    let groups = move || {
        let needle = search.get().to_ascii_lowercase();
        let mut groups: Vec<(&'static str, Vec<(&'static str, &'static str)>)> = Vec::new();
        all.with_value(|presets| {
            for p in presets {
                let hit = needle.is_empty()
                    || p.name.to_ascii_lowercase().contains(&needle)
                    || p.id.contains(&needle)
                    || p.group.to_ascii_lowercase().contains(&needle);
                if !hit && p.id != current_id.get() {
                    continue;
                }
                match groups.iter_mut().find(|g| g.0 == p.group) {
                    Some(g) => g.1.push((p.id, p.name)),
                    None => groups.push((p.group, vec![(p.id, p.name)])),
                }
            }
        });
        groups
    };
    let pick = move |ev| {
        let id = event_target_value(&ev);
        if let Ok(p) = presets::find(&id) {
            ctx.update(|s| s.set_model(p.model()));
        }
    };
    let summary = move || {
        ctx.state.with(|s| {
            format!(
                "{} · {} parameters · {}",
                s.model.name,
                format::params(s.model.arch.params()),
                s.model.arch.family()
            )
        })
    };
    view! {
        <fieldset class="group">
            <legend>"Model"</legend>
            <div class="field">
                <label for="preset-search">"Search models"</label>
                <input id="preset-search" data-testid="preset-search" type="search" placeholder="llama, esm, resnet…"
                    prop:value=move || search.get()
                    on:input=move |ev| search.set(event_target_value(&ev))/>
            </div>
            <div class="field">
                <label for="preset">"Model"</label>
                <select id="preset" data-testid="preset" on:change=pick>
                    {move || {
                        let current = current_id.get();
                        let custom = (current == "custom").then(|| {
                            let name = ctx.state.with_untracked(|s| s.model.name.clone());
                            view! { <option value="custom" selected=true>{format!("Custom: {name}")}</option> }
                        });
                        view! {
                            {custom}
                            {groups()
                                .into_iter()
                                .map(|(group, items)| {
                                    view! {
                                        <optgroup label=group>
                                            {items
                                                .into_iter()
                                                .map(|(id, name)| {
                                                    let selected = id == current;
                                                    view! { <option value=id selected=selected>{name}</option> }
                                                })
                                                .collect_view()}
                                        </optgroup>
                                    }
                                })
                                .collect_view()}
                        }
                    }}
                </select>
            </div>
            <p class="summary" data-testid="model-summary">{summary}</p>
            <CustomFields ctx=ctx/>
            <HfImport ctx=ctx/>
        </fieldset>
    }
}

/// Options of the architecture's text-valued fields.
fn enum_options(key: &str) -> Option<&'static [&'static str]> {
    match key {
        "mlp" => Some(&["gated", "plain"]),
        "norm" => Some(&["rms_norm", "layer_norm"]),
        "kind" | "stem.kind" => Some(&["bert", "esm"]),
        "topology" => Some(&["res_net", "mobile_net_v2"]),
        _ => None,
    }
}

#[component]
fn CustomFields(ctx: Ctx) -> impl IntoView {
    let error = RwSignal::new(None::<String>);
    let leaves = Memo::new(move |_| {
        let arch = ctx
            .state
            .with(|s| serde_json::to_value(&s.model.arch).unwrap_or_default());
        let mut out = Vec::new();
        query::flatten("", &arch, &mut out);
        out
    });
    let set_leaf = move |key: String, text: String| {
        let mut leaves_now = leaves.get_untracked();
        if let Some(l) = leaves_now.iter_mut().find(|l| l.0 == key) {
            l.1 = text;
        }
        let mut value = query::unflatten(leaves_now.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let name = ctx.state.with_untracked(|s| {
            if s.model.id == "custom" {
                s.model.name.clone()
            } else {
                format!("{} (edited)", s.model.name)
            }
        });
        query::set_path(&mut value, "name", serde_json::Value::String(name));
        match parse_model(Some(&value)) {
            Ok(model) => {
                error.set(None);
                ctx.update(|s| s.set_model(model));
            }
            Err(e) => error.set(Some(e.to_string())),
        }
    };
    view! {
        <details class="custom" data-testid="custom-fields">
            <summary>"Edit the architecture"</summary>
            <p class="hint">"Shapes of the selected model; a change makes it a custom model. Values are checked by the core."</p>
            <span class="error" role="alert" data-testid="custom-error">{move || error.get()}</span>
            <div class="grid">
                {move || {
                    leaves
                        .get()
                        .into_iter()
                        .filter(|(k, _)| k != "family")
                        .map(|(key, value)| {
                            let id = format!("arch-{}", key.replace('.', "-"));
                            let bad = error.with(|e| e.as_ref().is_some_and(|e| e.contains(&format!("`model.{key}`"))));
                            let k2 = key.clone();
                            let input = if value == "true" || value == "false" {
                                let checked = value == "true";
                                view! {
                                    <input id=id.clone() type="checkbox" checked=checked
                                        on:change=move |ev| set_leaf(k2.clone(), event_target_checked(&ev).to_string())/>
                                }
                                .into_any()
                            } else if let Some(opts) = enum_options(&key) {
                                view! {
                                    <select id=id.clone() on:change=move |ev| set_leaf(k2.clone(), event_target_value(&ev))>
                                        {opts
                                            .iter()
                                            .map(|o| view! { <option value=*o selected=*o == value>{*o}</option> })
                                            .collect_view()}
                                    </select>
                                }
                                .into_any()
                            } else {
                                view! {
                                    <input id=id.clone() type="text" value=value.clone() aria-invalid=bad.to_string()
                                        on:change=move |ev| set_leaf(k2.clone(), event_target_value(&ev))/>
                                }
                                .into_any()
                            };
                            view! {
                                <div class="field" class:bad=bad>
                                    <label for=id>{key}</label>
                                    {input}
                                </div>
                            }
                        })
                        .collect_view()
                }}
            </div>
        </details>
    }
}

#[component]
fn HfImport(ctx: Ctx) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let import = move |source: String| {
        perf::input();
        match headroom_core::hf_config::import(&source) {
            Ok(arch) => {
                let name = serde_json::from_str::<serde_json::Value>(&source)
                    .ok()
                    .and_then(|v| {
                        v.get("_name_or_path")
                            .and_then(|n| n.as_str())
                            .filter(|n| !n.is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| "imported config.json".into());
                error.set(None);
                ctx.update(|s| {
                    s.set_model(Model {
                        id: "custom".into(),
                        name,
                        arch,
                    })
                });
            }
            Err(e) => error.set(Some(e.to_string())),
        }
    };
    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        let file = ev
            .data_transfer()
            .and_then(|dt| dt.files())
            .and_then(|f| f.get(0));
        if let Some(file) = file {
            leaflet_read(file, move |content| {
                text.set(content.clone());
                import(content);
            });
        }
    };
    view! {
        <div class="field hf">
            <label for="hf-config">"Or paste / drop a Hugging Face config.json"</label>
            <textarea
                id="hf-config"
                data-testid="hf-config"
                rows="4"
                placeholder="{\"model_type\": \"llama\", \"hidden_size\": 4096, …}"
                prop:value=move || text.get()
                on:input=move |ev| text.set(event_target_value(&ev))
                on:dragover=move |ev: web_sys::DragEvent| ev.prevent_default()
                on:drop=on_drop
            ></textarea>
            <button type="button" data-testid="hf-import" on:click=move |_| import(text.get_untracked())>"Import config.json"</button>
            <span class="error" role="alert" data-testid="hf-error">{move || error.get()}</span>
        </div>
    }
}

/// Reads a file's text and hands it to `then`.
fn leaflet_read(file: web_sys::File, then: impl FnOnce(String) + 'static) {
    let promise = file.text();
    leptos::task::spawn_local(async move {
        if let Ok(v) = wasm_bindgen_futures::JsFuture::from(promise).await {
            then(v.as_string().unwrap_or_default());
        }
    });
}

#[component]
fn WorkloadPanel(ctx: Ctx) -> impl IntoView {
    let applies = Memo::new(move |_| ctx.state.with(|s| defaults::applies(&s.model.arch)));
    let w = move |f: fn(&Workload) -> String| move || ctx.state.with(|s| f(&s.workload));
    let mode = Memo::new(move |_| ctx.state.with(|s| s.workload.mode));
    let training = move || mode.get() == Mode::Training;
    let length_label =
        Memo::new(move |_| ctx.state.with(|s| defaults::length_label(&s.model.arch)));

    let length_fields = move || {
        let vision = ctx.state.with(|s| s.vision());
        let (min, max) = if vision {
            (16, headroom_core::workload::MAX_IMAGE_SIZE)
        } else {
            (1, headroom_core::workload::MAX_SEQ_LEN)
        };
        let field = if vision {
            "workload.image_size"
        } else {
            "workload.seq_len"
        };
        let to_pos = move |s: &AppState| -> f64 {
            let (a, b, l) = (s.view.from as f64, s.view.to as f64, s.length() as f64);
            let t = if s.view.log_x {
                (l.ln() - a.ln()) / (b.ln() - a.ln())
            } else {
                (l - a) / (b - a)
            };
            (t.clamp(0.0, 1.0) * 1000.0).round()
        };
        view! {
            <div class="field length">
                <label for="seq-len">{move || format!("Length: {}", length_label.get())}</label>
                <div class="row">
                    <input
                        id="seq-slider"
                        data-testid="seq-slider"
                        type="range"
                        min="0"
                        max="1000"
                        aria-label=move || format!("{} (slider)", length_label.get())
                        prop:value=move || ctx.state.with(to_pos).to_string()
                        on:input=move |ev| {
                            let t = event_target_value(&ev).parse::<f64>().unwrap_or(0.0) / 1000.0;
                            let len = ctx.state.with_untracked(|s| {
                                let (a, b) = (s.view.from as f64, s.view.to as f64);
                                if s.view.log_x { (a.ln() + t * (b.ln() - a.ln())).exp() } else { a + t * (b - a) }
                            });
                            let len = len.round().max(1.0) as u32;
                            let _ = ctx.apply(|w| *w = w.with_length(vision, len));
                        }
                    />
                </div>
                {number_field(
                    "seq-len",
                    "exact",
                    min,
                    max,
                    move || ctx.state.with(|s| s.length().to_string()),
                    move |t| {
                        let v = parse_u32(field, t, min, max)?;
                        ctx.apply(|w| *w = w.with_length(vision, v))
                    },
                )}
            </div>
        }
    };

    view! {
        <fieldset class="group">
            <legend>"Workload"</legend>
            {move || applies.get().training.then(|| select_field(
                "mode", "Mode",
                vec![("inference", "Inference"), ("training", "Training")],
                move || ctx.state.with(|s| if s.workload.mode == Mode::Training { "training".into() } else { "inference".into() }),
                move |v| { let _ = ctx.apply(|w| w.mode = if v == "training" { Mode::Training } else { Mode::Inference }); },
            ))}
            {number_field("batch", "Batch size", 1, headroom_core::workload::MAX_BATCH, w(|w| w.batch.to_string()),
                move |t| { let v = parse_u32("workload.batch", t, 1, headroom_core::workload::MAX_BATCH)?; ctx.apply(|w| w.batch = v) })}
            {length_fields}
            {move || {
                let a = applies.get();
                let show = !training() || ctx.state.with(|s| s.workload.training.lora.is_some());
                show.then(|| {
                    let mut opts = vec![("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32")];
                    if a.quantised {
                        opts.push(("int8", "int8 (bitsandbytes)"));
                        opts.push(("int4", "int4 / NF4"));
                    }
                    let label = if training() { "Base weight dtype (LoRA)" } else { "Weight dtype" };
                    select_field("dtype", label, opts,
                        move || ctx.state.with(|s| s.workload.dtype.name().to_string()),
                        move |v| { let _ = ctx.apply(|w| w.dtype = dtype_from(&v)); })
                })
            }}
            {move || applies.get().attention.then(|| select_field(
                "attention", "Attention kernel",
                vec![("sdpa", "SDPA (fused)"), ("eager", "eager (materialised scores)")],
                move || ctx.state.with(|s| if s.workload.attention == Attention::Eager { "eager".into() } else { "sdpa".into() }),
                move |v| { let _ = ctx.apply(|w| w.attention = if v == "eager" { Attention::Eager } else { Attention::Sdpa }); },
            ))}
            {move || (!training()).then(|| view! { <InferenceFields ctx=ctx applies=applies/> })}
            {move || training().then(|| view! { <TrainingFields ctx=ctx applies=applies/> })}
            {move || applies.get().esmfold.then(|| view! { <EsmFoldFields ctx=ctx/> })}
            {select_field(
                "load", "How weights were loaded",
                vec![("compact", "moved to the GPU (compact)"), ("build_then_cast", "built on GPU in fp32, then cast")],
                move || ctx.state.with(|s| if s.workload.load == LoadPath::BuildThenCast { "build_then_cast".into() } else { "compact".into() }),
                move |v| { let _ = ctx.apply(|w| w.load = if v == "build_then_cast" { LoadPath::BuildThenCast } else { LoadPath::Compact }); },
            )}
        </fieldset>
    }
}

#[component]
fn InferenceFields(ctx: Ctx, applies: Memo<defaults::Applies>) -> impl IntoView {
    let kind = Memo::new(move |_| ctx.state.with(|s| s.workload.inference.kind));
    let generation = move || applies.get().generation;
    view! {
        {move || generation().then(|| select_field(
            "kind", "Inference",
            vec![("generate", "generate (prefill + decode, KV cache)"), ("forward", "one forward pass")],
            move || ctx.state.with(|s| if s.workload.inference.kind == InferenceKind::Forward { "forward".into() } else { "generate".into() }),
            move |v| { let _ = ctx.apply(|w| w.inference.kind = if v == "forward" { InferenceKind::Forward } else { InferenceKind::Generate }); },
        ))}
        {move || (generation() && kind.get() == InferenceKind::Generate).then(|| view! {
            {number_field("new-tokens", "New tokens (decode steps)", 0, headroom_core::workload::MAX_NEW_TOKENS,
                move || ctx.state.with(|s| s.workload.inference.new_tokens.to_string()),
                move |t| { let v = parse_u32("workload.inference.new_tokens", t, 0, headroom_core::workload::MAX_NEW_TOKENS)?; ctx.apply(|w| w.inference.new_tokens = v) })}
            {select_field(
                "kv-dtype", "KV-cache dtype",
                vec![("auto", "same as weights"), ("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("int8", "int8"), ("int4", "int4")],
                move || ctx.state.with(|s| s.workload.inference.kv_dtype.map_or("auto".to_string(), |d| d.name().to_string())),
                move |v| { let _ = ctx.apply(|w| w.inference.kv_dtype = (v != "auto").then(|| dtype_from(&v))); },
            )}
        })}
        {move || (generation() && kind.get() == InferenceKind::Forward).then(|| view! {
            <div class="field check">
                <input id="kv-cache" data-testid="kv-cache" type="checkbox"
                    prop:checked=move || ctx.state.with(|s| s.workload.inference.kv_cache)
                    on:change=move |ev| { let on = event_target_checked(&ev); let _ = ctx.apply(|w| w.inference.kv_cache = on); }/>
                <label for="kv-cache">"Return a KV cache (use_cache=True)"</label>
            </div>
        })}
        {move || applies.get().logits.then(|| {
            let opts = if generation() {
                vec![("last", "last position only"), ("all", "every position"), ("none", "no head (hidden states)")]
            } else {
                vec![("all", "LM head over every position"), ("none", "no head (hidden states)")]
            };
            select_field("logits", "Logits", opts,
                move || ctx.state.with(|s| match s.workload.inference.logits { Logits::Last => "last", Logits::All => "all", Logits::None => "none" }.to_string()),
                move |v| { let _ = ctx.apply(|w| w.inference.logits = match v.as_str() { "all" => Logits::All, "none" => Logits::None, _ => Logits::Last }); })
        })}
    }
}

#[component]
fn TrainingFields(ctx: Ctx, applies: Memo<defaults::Applies>) -> impl IntoView {
    let lora_on = Memo::new(move |_| ctx.state.with(|s| s.workload.training.lora.is_some()));
    view! {
        {select_field(
            "optimizer", "Optimizer",
            vec![("adamw", "AdamW"), ("sgd", "SGD"), ("sgd_momentum", "SGD + momentum"), ("adafactor", "Adafactor")],
            move || ctx.state.with(|s| match s.workload.training.optimizer { Optimizer::Adamw => "adamw", Optimizer::Sgd => "sgd", Optimizer::SgdMomentum => "sgd_momentum", Optimizer::Adafactor => "adafactor" }.to_string()),
            move |v| { let _ = ctx.apply(|w| w.training.optimizer = match v.as_str() { "sgd" => Optimizer::Sgd, "sgd_momentum" => Optimizer::SgdMomentum, "adafactor" => Optimizer::Adafactor, _ => Optimizer::Adamw }); },
        )}
        {select_field(
            "precision", "Precision",
            vec![("amp_bf16", "fp32 weights + bf16 autocast"), ("bf16", "pure bf16"), ("fp32", "fp32")],
            move || ctx.state.with(|s| match s.workload.training.precision { Precision::AmpBf16 => "amp_bf16", Precision::Bf16 => "bf16", Precision::Fp32 => "fp32" }.to_string()),
            move |v| { let _ = ctx.apply(|w| w.training.precision = match v.as_str() { "bf16" => Precision::Bf16, "fp32" => Precision::Fp32, _ => Precision::AmpBf16 }); },
        )}
        {number_field("steps", "Optimizer steps", 1, headroom_core::workload::MAX_STEPS,
            move || ctx.state.with(|s| s.workload.training.steps.to_string()),
            move |t| { let v = parse_u32("workload.training.steps", t, 1, headroom_core::workload::MAX_STEPS)?; ctx.apply(|w| w.training.steps = v) })}
        {move || applies.get().hf_training.then(|| view! {
            <div class="field check">
                <input id="grad-ckpt" data-testid="grad-ckpt" type="checkbox"
                    prop:checked=move || ctx.state.with(|s| s.workload.training.grad_checkpointing)
                    on:change=move |ev| { let on = event_target_checked(&ev); let _ = ctx.apply(|w| w.training.grad_checkpointing = on); }/>
                <label for="grad-ckpt">"Gradient checkpointing"</label>
            </div>
            <div class="field check">
                <input id="lora" data-testid="lora" type="checkbox"
                    prop:checked=move || lora_on.get()
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        let _ = ctx.apply(|w| w.training.lora = on.then(|| Lora { rank: 16, alpha: Some(32.0), target_modules: Vec::new(), dropout: None }));
                    }/>
                <label for="lora">"LoRA adapters (frozen base)"</label>
            </div>
        })}
        {move || (applies.get().hf_training && lora_on.get()).then(|| view! {
            {number_field("lora-rank", "LoRA rank", 1, 65_536,
                move || ctx.state.with(|s| s.workload.training.lora.as_ref().map_or(16, |l| l.rank).to_string()),
                move |t| { let v = parse_u32("workload.training.lora.rank", t, 1, 65_536)?; ctx.apply(|w| if let Some(l) = w.training.lora.as_mut() { l.rank = v }) })}
            <div class="field">
                <label for="lora-targets">"Target modules (comma separated; empty = q_proj, v_proj)"</label>
                <input id="lora-targets" data-testid="lora-targets" type="text"
                    prop:value=move || ctx.state.with(|s| s.workload.training.lora.as_ref().map(|l| l.target_modules.join(",")).unwrap_or_default())
                    on:change=move |ev| {
                        let list: Vec<String> = event_target_value(&ev).split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                        let _ = ctx.apply(|w| if let Some(l) = w.training.lora.as_mut() { l.target_modules = list });
                    }/>
            </div>
        })}
    }
}

#[component]
fn EsmFoldFields(ctx: Ctx) -> impl IntoView {
    view! {
        {select_field(
            "stem-dtype", "ESM-2 stem dtype",
            vec![("fp16", "fp16 (default)"), ("bf16", "bf16"), ("fp32", "fp32")],
            move || ctx.state.with(|s| s.workload.esmfold.stem_dtype.name().to_string()),
            move |v| { let _ = ctx.apply(|w| w.esmfold.stem_dtype = dtype_from(&v)); },
        )}
        {number_field("chunk-size", "Trunk chunk size (empty = unchunked)", 1, headroom_core::workload::MAX_SEQ_LEN,
            move || ctx.state.with(|s| s.workload.esmfold.chunk_size.map(|c| c.to_string()).unwrap_or_default()),
            move |t| {
                let v = if t.is_empty() { None } else { Some(parse_u32("workload.esmfold.chunk_size", t, 1, headroom_core::workload::MAX_SEQ_LEN)?) };
                ctx.apply(|w| w.esmfold.chunk_size = v)
            })}
        {number_field("recycles", "Recycles", 0, 64,
            move || ctx.state.with(|s| s.workload.esmfold.num_recycles.map(|c| c.to_string()).unwrap_or_default()),
            move |t| {
                let v = if t.is_empty() { None } else { Some(parse_u32("workload.esmfold.num_recycles", t, 0, 64)?) };
                ctx.apply(|w| w.esmfold.num_recycles = v)
            })}
    }
}

#[component]
fn CalibrationPanel(ctx: Ctx) -> impl IntoView {
    let paste = RwSignal::new(String::new());
    let status = RwSignal::new(None::<Result<String, String>>);
    let load = move |text: String| match calib::parse_profile(&text, calib::LOADED_ID) {
        Ok(p) => {
            let msg = format!("Loaded “{}”: {} measured points.", p.name, p.points.len());
            ctx.profiles.update(|ps| {
                ps.retain(|x| x.id != calib::LOADED_ID);
                ps.push(p);
            });
            ctx.update(|s| s.profile = calib::LOADED_ID.into());
            status.set(Some(Ok(msg)));
        }
        Err(e) => status.set(Some(Err(e))),
    };
    let on_file = move |ev: leptos::ev::Event| {
        let input: HtmlInputElement = event_target(&ev);
        if let Some(file) = input.files().and_then(|f| f.get(0)) {
            leaflet_read(file, load);
        }
    };
    let figures = move || {
        let rt = ctx.runtime.get();
        let rows = [
            ("CUDA context", rt.cuda_context_bytes),
            ("cuBLAS handle + kernels", rt.cublas_library_bytes),
            ("cuBLAS workspace", rt.cublas_workspace_bytes),
            ("model kernels", rt.model_kernels_bytes),
            ("backward thread", rt.backward_library_bytes),
            ("cuDNN", rt.cudnn_library_bytes),
        ];
        let alloc = if rt.allocator.expandable_segments {
            "expandable segments"
        } else {
            "default"
        };
        view! {
            <table class="figures" data-testid="runtime-figures">
                <caption>{format!("Runtime figures ({})", rt.gpu.clone().unwrap_or_else(|| "unnamed GPU".into()))}</caption>
                <tbody>
                    {rows.into_iter().map(|(k, v)| view! { <tr><th scope="row">{k}</th><td>{format::mib(headroom_core::Bytes(v))}</td></tr> }).collect_view()}
                    <tr><th scope="row">"allocator"</th><td>{alloc}</td></tr>
                </tbody>
            </table>
        }
    };
    view! {
        <fieldset class="group">
            <legend>"Calibration profile"</legend>
            <div class="field">
                <label for="profile">"Profile"</label>
                <select id="profile" data-testid="profile" on:change=move |ev| { let v = event_target_value(&ev); ctx.update(|s| s.profile = v); }>
                    {move || {
                        let current = ctx.state.with(|s| s.profile.clone());
                        ctx.profiles.get().into_iter().map(|p| {
                            let selected = p.id == current;
                            view! { <option value=p.id.clone() selected=selected>{format!("{} ({} points)", p.name, p.points.len())}</option> }
                        }).collect_view()
                    }}
                </select>
            </div>
            {figures}
            <details class="load-profile">
                <summary>"Load a profile from the collector"</summary>
                <div class="field">
                    <label for="profile-file">"Profile JSON file"</label>
                    <input id="profile-file" data-testid="profile-file" type="file" accept=".json,application/json" on:change=on_file/>
                </div>
                <div class="field">
                    <label for="profile-paste">"or paste it"</label>
                    <textarea id="profile-paste" data-testid="profile-paste" rows="3"
                        placeholder="{\"runtime\": {\"cuda_context_bytes\": …}, \"points\": […]}"
                        prop:value=move || paste.get()
                        on:input=move |ev| paste.set(event_target_value(&ev))></textarea>
                </div>
                <button type="button" data-testid="profile-load" on:click=move |_| load(paste.get_untracked())>"Load profile"</button>
            </details>
            <p class="status" role="status" data-testid="profile-status">
                {move || match status.get() {
                    Some(Ok(m)) => view! { <span class="ok">{m}</span> }.into_any(),
                    Some(Err(e)) => view! { <span class="error">{e}</span> }.into_any(),
                    None => ().into_any(),
                }}
            </p>
        </fieldset>
    }
}

fn download(name: &str, mime: &str, text: &str) {
    LAST_EXPORT.with(|e| *e.borrow_mut() = Some((name.to_string(), text.to_string())));
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
    let bag = web_sys::BlobPropertyBag::new();
    bag.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &bag) else {
        return;
    };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else {
        return;
    };
    click_link(name, &url);
    let _ = web_sys::Url::revoke_object_url(&url);
}

fn click_link(name: &str, href: &str) {
    if let Ok(a) = document().create_element("a") {
        let a: web_sys::HtmlAnchorElement = a.unchecked_into();
        a.set_href(href);
        a.set_download(name);
        a.click();
    }
}

fn file_stem(state: &AppState) -> String {
    let id = if state.model.id == "custom" {
        "custom"
    } else {
        &state.model.id
    };
    format!("headroom-{id}")
}

#[component]
fn ChartPanel(ctx: Ctx) -> impl IntoView {
    let canvas: NodeRef<html::Canvas> = NodeRef::new();
    let layout = StoredValue::new(Layout::default());
    let resize = RwSignal::new(0u32);
    let hover = RwSignal::new(None::<(f64, usize)>);
    let off_scale = RwSignal::new(Vec::<(String, f64)>::new());
    let _ = window_event_listener(leptos::ev::resize, move |_| resize.update(|n| *n += 1));

    Effect::new(move |_| {
        resize.track();
        let Some(el) = canvas.get() else { return };
        let el: HtmlCanvasElement = el;
        let dpr = window().device_pixel_ratio().max(1.0);
        let (w, h) = (
            el.client_width().max(300) as f64,
            el.client_height().max(200) as f64,
        );
        let (pw, ph) = ((w * dpr) as u32, (h * dpr) as u32);
        if el.width() != pw || el.height() != ph {
            el.set_width(pw);
            el.set_height(ph);
        }
        // A stale curve on new axes would mislead: wait for the new one.
        if !ctx.curve_is_current() {
            return;
        }
        let theme = ctx.theme.get().resolve();
        let (from, to, log_x, x_label, length, gpu_ids) = ctx.state.with(|s| {
            (
                s.view.from,
                s.view.to,
                s.view.log_x,
                defaults::length_label(&s.model.arch),
                s.length(),
                s.gpus.clone(),
            )
        });
        let gpu_lines: Vec<(String, f64)> = CATALOG
            .iter()
            .filter(|g| gpu_ids.iter().any(|id| id == g.id))
            .map(|g| {
                (
                    g.name.to_string(),
                    headroom_core::Bytes(g.usable_bytes).as_gb(),
                )
            })
            .collect();
        let measured: Vec<(u32, f64)> = ctx
            .measured
            .get()
            .into_iter()
            .map(|(l, b)| (l, headroom_core::Bytes(b).as_gb()))
            .collect();
        let total = ctx
            .point
            .with(|p| p.as_ref().ok().map(|e| e.driver_peak.as_gb()));
        let result = ctx.curve.with(|curve| {
            ctx.bands.with(|bands| {
                let spec = ChartSpec {
                    curve,
                    bands,
                    from,
                    to,
                    log_x,
                    x_label,
                    marker: Some((length, total)),
                    gpu_lines: &gpu_lines,
                    measured: &measured,
                    theme,
                    scale: dpr,
                };
                let Some(backend) = CanvasBackend::with_canvas_object(el.clone()) else {
                    return Err("no 2D canvas context".to_string());
                };
                chart::draw(&backend.into_drawing_area(), &spec)
            })
        });
        match result {
            Ok(l) => {
                off_scale.set(l.off_scale.clone());
                layout.set_value(l);
            }
            Err(e) => leptos::logging::warn!("chart: {e}"),
        }
        perf::drawn();
        let _ = el.set_attribute("data-draws", &perf::draws().to_string());
        let _ = el.set_attribute("data-measured", &measured.len().to_string());
        let _ = el.set_attribute("data-workers", &crate::workers::ready().len().to_string());
        let _ = el.set_attribute(
            "data-points",
            &ctx.curve.with(|c| c.lengths.len()).to_string(),
        );
    });

    let index_at = move |ev: &web_sys::MouseEvent| -> Option<(f64, usize)> {
        let dpr = window().device_pixel_ratio().max(1.0);
        let x = ev.offset_x() as f64;
        let l = layout.with_value(|l| l.length_at(x * dpr))?;
        let log_x = ctx.state.with_untracked(|s| s.view.log_x);
        let i = ctx.curve.with_untracked(|c| c.nearest(l, log_x))?;
        Some((x, i))
    };
    let tooltip = move || {
        let (x, i) = hover.get()?;
        let (length, e) = ctx
            .curve
            .with(|c| Some((*c.lengths.get(i)?, c.estimates.get(i)?.clone())))?;
        let mut parts: Vec<(Component, headroom_core::Bytes)> = e
            .breakdown
            .iter()
            .filter(|s| s.bytes.0 > 0)
            .map(|s| (s.component, s.bytes))
            .collect();
        parts.sort_by_key(|p| std::cmp::Reverse(p.1));
        parts.truncate(4);
        Some(view! {
            <div class="tooltip" data-testid="tooltip" style=format!("left: {x:.0}px")>
                <strong>{format!("{} → {}", format::int(length as u64), format::bytes(e.driver_peak))}</strong>
                <ul>{parts.into_iter().map(|(c, b)| view! { <li><span class="swatch" style=format!("background:{}", chart::css_color(c))></span>{format!("{}: {}", c.label(), format::bytes(b))}</li> }).collect_view()}</ul>
            </div>
        })
    };
    let caption = move || {
        let mut lines = Vec::new();
        let n_points = ctx.curve.with(|c| c.lengths.len() + c.failed);
        if let Some((len, msg)) = ctx.curve.with(|c| c.error.clone()) {
            let failed = ctx.curve.with(|c| c.failed);
            lines.push(format!(
                "The core could not estimate {failed} of {n_points} lengths (first at {}): {msg}",
                format::int(len as u64)
            ));
        }
        (!lines.is_empty()).then(|| view! { <p class="error" role="alert" data-testid="curve-error">{lines.join(" ")}</p> })
    };

    let export_png = move |_| {
        if let Some(el) = canvas.get_untracked() {
            if let Ok(url) = el.to_data_url() {
                let name = format!("{}.png", ctx.state.with_untracked(file_stem));
                LAST_EXPORT.with(|e| *e.borrow_mut() = Some((name.clone(), url.clone())));
                click_link(&name, &url);
            }
        }
    };
    let export_csv = move |_| {
        let vision = ctx.state.with_untracked(|s| s.vision());
        let csv = ctx.curve.with_untracked(|c| export::curve_csv(c, vision));
        download(
            &format!("{}-curve.csv", ctx.state.with_untracked(file_stem)),
            "text/csv",
            &csv,
        );
    };
    let export_json = move |_| {
        // A newer estimate is still coming: its breakdown says so.
        if ctx.point_pending.get_untracked() {
            return;
        }
        let link = page_url(&ctx.state.with_untracked(AppState::to_query));
        let rt = ctx.runtime.get_untracked();
        let text = ctx.point.with_untracked(|p| {
            ctx.state.with_untracked(|s| {
                export::estimate_json(s, &rt, p.as_ref().map_err(String::as_str), &link)
            })
        });
        download(
            &format!("{}-estimate.json", ctx.state.with_untracked(file_stem)),
            "application/json",
            &text,
        );
    };

    let range_field = move |id: &'static str, label: &'static str, is_from: bool| {
        number_field(
            id,
            label,
            1,
            headroom_core::workload::MAX_SEQ_LEN,
            move || {
                ctx.state
                    .with(|s| if is_from { s.view.from } else { s.view.to }.to_string())
            },
            move |t| {
                let v = parse_u32(
                    if is_from { "from" } else { "to" },
                    t,
                    1,
                    headroom_core::workload::MAX_SEQ_LEN,
                )?;
                let (from, to) = ctx.state.with_untracked(|s| {
                    if is_from {
                        (v, s.view.to)
                    } else {
                        (s.view.from, v)
                    }
                });
                if from >= to {
                    return Err(format!(
                        "`{}`: the range must run upwards ({from} to {to})",
                        if is_from { "from" } else { "to" }
                    ));
                }
                ctx.update(|s| {
                    s.view.from = from;
                    s.view.to = to;
                });
                Ok(())
            },
        )
    };

    view! {
        <div class="panel chart-panel">
            <div class="toolbar" role="group" aria-label="Chart settings">
                <div class="field check">
                    <input id="log-x" data-testid="log-x" type="checkbox"
                        prop:checked=move || ctx.state.with(|s| s.view.log_x)
                        on:change=move |ev| { let on = event_target_checked(&ev); ctx.update(|s| s.view.log_x = on); }/>
                    <label for="log-x">"Log length axis"</label>
                </div>
                {range_field("range-from", "From", true)}
                {range_field("range-to", "To", false)}
                <details class="gpus" data-testid="gpu-lines">
                    <summary>{move || format!("GPU lines ({} of {})", ctx.state.with(|s| s.gpus.len()), CATALOG.len())}</summary>
                    <div class="gpu-list">
                    {CATALOG.iter().map(|g| {
                        let id = g.id;
                        let input_id = format!("gpu-{id}");
                        view! {
                            <span class="check">
                                <input id=input_id.clone() data-testid=input_id.clone() type="checkbox"
                                    prop:checked=move || ctx.state.with(|s| s.gpus.iter().any(|x| x == id))
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        ctx.update(|s| {
                                            s.gpus.retain(|x| x != id);
                                            if on {
                                                s.gpus = CATALOG.iter().map(|g| g.id.to_string()).filter(|x| x == id || s.gpus.contains(x)).collect();
                                            }
                                        });
                                    }/>
                                <label for=input_id>{g.name}</label>
                            </span>
                        }
                    }).collect_view()}
                    </div>
                </details>
            </div>
            <div class="canvas-wrap" on:mouseleave=move |_| hover.set(None)>
                <canvas
                    node_ref=canvas
                    data-testid="chart"
                    role="img"
                    aria-label=move || ctx.state.with(|s| format!("Peak VRAM of {} against {}", s.model.name, defaults::length_label(&s.model.arch)))
                    on:mousemove=move |ev| hover.set(index_at(&ev))
                    on:click=move |ev| {
                        if let Some((_, i)) = index_at(&ev) {
                            if let Some(len) = ctx.curve.with_untracked(|c| c.lengths.get(i).copied()) {
                                let vision = ctx.state.with_untracked(|s| s.vision());
                                let _ = ctx.apply(|w| *w = w.with_length(vision, len));
                            }
                        }
                        hover.set(index_at(&ev));
                    }
                ></canvas>
                {tooltip}
            </div>
            {move || ctx.curve_progress.get().map(|done| view! {
                <p class="hint" role="status" data-testid="curve-progress">
                    {format!("Computing the curve: {:.0}%…", done * 100.0)}
                </p>
            })}
            {caption}
            {move || {
                let off = off_scale.get();
                (!off.is_empty()).then(|| view! {
                    <p class="hint" data-testid="off-scale">
                        {format!("Above the chart: {}", off.iter().map(|(n, g)| format!("{n} ({} usable)", format::gb(*g))).collect::<Vec<_>>().join(", "))}
                    </p>
                })
            }}
            <div class="exports" role="group" aria-label="Export">
                <button type="button" data-testid="export-png" on:click=export_png>"Chart as PNG"</button>
                <button type="button" data-testid="export-csv" on:click=export_csv>"Curve as CSV"</button>
                <button type="button" data-testid="export-json" on:click=export_json>"Estimate as JSON"</button>
            </div>
        </div>
    }
}

#[component]
fn BreakdownPanel(ctx: Ctx) -> impl IntoView {
    view! {
        <div class="panel breakdown" data-testid="breakdown">
            <h2>"Breakdown at the chosen length"</h2>
            {move || {
                let (length, label) = ctx.state.with(|s| (s.length(), defaults::length_label(&s.model.arch)));
                let point = if ctx.point_pending.get() {
                    Err(None)
                } else {
                    ctx.point.get().map_err(Some)
                };
                match point {
                    // The core's error, or a newer estimate still coming.
                    Err(e) => {
                        let (class, role, id) = match e {
                            Some(_) => ("error", "alert", "estimate-error"),
                            None => ("note", "status", "point-pending"),
                        };
                        let text = e.unwrap_or_else(|| "Computing the estimate at this length…".to_string());
                        view! { <p class=class role=role data-testid=id>{text}</p> }.into_any()
                    }
                    Ok(e) => {
                        let total = e.driver_peak;
                        let parts: Vec<_> = e.breakdown.iter().filter(|s| s.bytes.0 > 0).copied().collect();
                        view! {
                            <p class="peak">
                                "Peak "<strong data-testid="peak-total">{format::bytes(total)}</strong>
                                {format!(" at {} {}", label, format::int(length as u64))}
                                ", during "<code data-testid="peak-op">{e.peak_op.clone()}</code>
                            </p>
                            <div class="bar" role="img" aria-label="Share of each component at the peak">
                                {parts.iter().map(|s| {
                                    let pct = if total.0 > 0 { s.bytes.0 as f64 * 100.0 / total.0 as f64 } else { 0.0 };
                                    view! { <span title=format!("{}: {}", s.component.label(), format::bytes(s.bytes))
                                        style=format!("width:{pct:.3}%;background:{}", chart::css_color(s.component))></span> }
                                }).collect_view()}
                            </div>
                            <table data-testid="breakdown-table">
                                <thead><tr><th scope="col">"Component"</th><th scope="col">"GB"</th><th scope="col">"Share"</th></tr></thead>
                                <tbody>
                                    {parts.iter().map(|s| view! {
                                        <tr data-testid=format!("row-{}", s.component.key())>
                                            <th scope="row"><span class="swatch" style=format!("background:{}", chart::css_color(s.component))></span>{s.component.label()}</th>
                                            <td>{format::bytes(s.bytes)}</td>
                                            <td>{format::percent(s.bytes, total)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                                <tfoot>
                                    <tr><th scope="row">"Driver-level peak (nvidia-smi)"</th><td>{format::bytes(total)}</td><td>"100%"</td></tr>
                                    <tr><th scope="row">"torch max reserved"</th><td>{format::bytes(e.reserved_peak)}</td><td></td></tr>
                                    <tr><th scope="row">"torch max allocated"</th><td>{format::bytes(e.allocated_peak)}</td><td></td></tr>
                                    <tr><th scope="row">"Parameters"</th><td colspan="2">{format::params(e.params)}</td></tr>
                                </tfoot>
                            </table>
                        }.into_any()
                    }
                }
            }}
        </div>
    }
}

#[component]
fn FitPanel(ctx: Ctx) -> impl IntoView {
    view! {
        <div class="panel fit">
            <h2>"Which GPUs fit"</h2>
            {number_field("margin", "Fragmentation margin (%)", 0, MAX_MARGIN_PCT as u64,
                move || ctx.state.with(|s| s.margin_pct.to_string()),
                move |t| {
                    let v = parse_u32("margin", t, 0, MAX_MARGIN_PCT as u64)?;
                    ctx.update(|s| s.margin_pct = v);
                    Ok(())
                })}
            <div class="table-wrap">
            <table data-testid="gpu-table" aria-busy=move || ctx.fit_pending.get().to_string() class:stale=move || ctx.fit_pending.get()>
                <thead>
                    <tr>
                        <th scope="col">"GPU"</th>
                        <th scope="col">"Usable"</th>
                        <th scope="col">{move || format!("Longest {}", ctx.state.with(|s| if s.vision() { "image" } else { "sequence" }))}</th>
                        <th scope="col">"Largest batch"</th>
                        <th scope="col">"Jobs per card"</th>
                        <th scope="col">"Reserve per job"</th>
                    </tr>
                </thead>
                <tbody>
                    {move || match ctx.fit.get() {
                        None => view! { <tr><td colspan="6">"computing…"</td></tr> }.into_any(),
                        Some(rows) => rows.into_iter().map(|r| {
                            let opt = |v: Result<Option<u32>, String>| match v {
                                Ok(Some(n)) => format::int(n as u64),
                                Ok(None) => "does not fit".into(),
                                Err(e) => format!("n/a ({e})"),
                            };
                            let fits = r.jobs.unwrap_or(0) > 0;
                            view! {
                                <tr data-testid=format!("fit-{}", r.gpu.id) class:nofit=!fits>
                                    <th scope="row">{r.gpu.name}</th>
                                    <td>{format::bytes(headroom_core::Bytes(r.gpu.usable_bytes))}</td>
                                    <td data-testid=format!("fit-{}-length", r.gpu.id)>{opt(r.max_length)}</td>
                                    <td data-testid=format!("fit-{}-batch", r.gpu.id)>{opt(r.max_batch)}</td>
                                    <td data-testid=format!("fit-{}-jobs", r.gpu.id)>{r.jobs.map_or("n/a".into(), |j| j.to_string())}</td>
                                    <td data-testid=format!("fit-{}-reserve", r.gpu.id)>{r.reservation.map_or("n/a".into(), format::mib)}</td>
                                </tr>
                            }
                        }).collect_view().into_any(),
                    }}
                </tbody>
            </table>
            </div>
            <p class="hint">
                {move || format!(
                    "Longest length and largest batch leave the {}% margin free; a scheduler should request the reservation per job (the peak plus {}%, whole MiB). Runtime figures: {}.",
                    ctx.state.with(|s| s.margin_pct), ctx.state.with(|s| s.margin_pct), ctx.profile.with(|p| p.name.clone())
                )}
            </p>
        </div>
    }
}
