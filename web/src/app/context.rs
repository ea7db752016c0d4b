//! The page's shared state: one [`PageContext`] of signals, provided by
//! [`super::App`] and read by every panel with [`use_page`].

use super::perf;
use crate::calib::{self, Profile};
use crate::chart::Theme;
use crate::curve::{bands, likely_band, Band, CurveData};
use crate::gpu_rows::FitRow;
use crate::jobs::{self, CurveKey};
use crate::registry::Listing;
use crate::state::AppState;
use headroom_core::estimate::Estimate;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use leptos::prelude::*;

/// The theme the user picked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThemeChoice {
    /// The system's.
    Auto,
    /// Light.
    Light,
    /// Dark.
    Dark,
}

impl ThemeChoice {
    /// Its name (`data-theme`, the stored choice).
    pub fn name(self) -> &'static str {
        match self {
            ThemeChoice::Auto => "auto",
            ThemeChoice::Light => "light",
            ThemeChoice::Dark => "dark",
        }
    }

    /// The choice the theme button leads to.
    pub fn next(self) -> ThemeChoice {
        match self {
            ThemeChoice::Auto => ThemeChoice::Light,
            ThemeChoice::Light => ThemeChoice::Dark,
            ThemeChoice::Dark => ThemeChoice::Auto,
        }
    }

    /// The chart's colours for this choice.
    pub fn resolve(self) -> Theme {
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

    /// The choice stored by an earlier visit.
    fn stored() -> ThemeChoice {
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
}

/// Signals shared by the page's parts.
#[derive(Clone, Copy)]
pub struct PageContext {
    /// Everything the user set (the URL's content).
    pub state: RwSignal<AppState>,
    /// Calibration profiles: the bundled ones and one loaded from a file.
    pub profiles: RwSignal<Vec<Profile>>,
    /// What the link could not read.
    pub notes: RwSignal<Vec<String>>,
    /// The theme the user picked.
    pub theme: RwSignal<ThemeChoice>,
    /// The chosen profile's runtime.
    pub runtime: Memo<RuntimeProfile>,
    /// The chosen profile.
    pub profile: Memo<Profile>,
    /// The last curve computed.
    pub curve: RwSignal<CurveData>,
    /// How far this thread is through a slow curve's computation (0 to 1).
    pub curve_progress: RwSignal<Option<f64>>,
    /// The curve on hand holds only its first points: the rest are coming.
    pub curve_refining: RwSignal<bool>,
    /// What the curve in `curve` was computed for (the key and runtime).
    pub curve_for: StoredValue<Option<(CurveKey, RuntimeProfile)>>,
    /// What the curve for the current inputs is keyed by.
    pub curve_key: Memo<CurveKey>,
    /// The curve's stacked bands.
    pub bands: Memo<Vec<Band>>,
    /// The likely range of the curve's total at each of its lengths (GB).
    pub likely: Memo<Vec<(f64, f64)>>,
    /// The estimate at the chosen length (the last one computed).
    pub point: RwSignal<Result<Estimate, String>>,
    /// A newer estimate at the chosen length is being computed.
    pub point_pending: RwSignal<bool>,
    /// The profile's measured points that match the inputs: (length, bytes).
    pub measured: Memo<Vec<(u32, u64)>>,
    /// The GPU table (`None` until the first one is in).
    pub fit: RwSignal<Option<Vec<FitRow>>>,
    /// A newer GPU table is being computed.
    pub fit_pending: RwSignal<bool>,
    /// The profile registry's profiles, once listed (`super::registry`).
    pub registry: RwSignal<Option<Listing>>,
}

/// The page's context (inside [`super::App`]).
pub fn use_page() -> PageContext {
    expect_context::<PageContext>()
}

/// A Memo of what `of` reads from the state: a view that follows it is
/// rebuilt only when that changes, not on every change of the state. One
/// copy of the Memo's code per type keeps the page's code small.
pub fn state_memo<T: PartialEq + Send + Sync + 'static>(
    page: PageContext,
    of: fn(&AppState) -> T,
) -> Memo<T> {
    Memo::new(move |_| page.state.with(of))
}

impl PageContext {
    /// The page's signals, read from the URL. A quick estimate at the
    /// chosen length and a quick first curve are computed here, before the
    /// first paint (`jobs::run`).
    pub fn from_location() -> PageContext {
        let profiles_list = calib::bundled();
        let ids: Vec<&str> = profiles_list.iter().map(|p| p.id.as_str()).collect();
        let (initial, notes) = AppState::from_query(&location_query(), &ids);
        let state = RwSignal::new(initial);
        let profiles = RwSignal::new(profiles_list);
        let notes = RwSignal::new(notes);
        let theme = RwSignal::new(ThemeChoice::stored());

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
        let curve_key = Memo::new(move |_| state.with(jobs::curve_key));
        let (point, point_pending) = jobs::run::first_point(state, runtime);
        let (curve, curve_for) = jobs::run::first_curve(curve_key, runtime);
        let measured = Memo::new(move |_| {
            let rt = runtime.get();
            let points = profile.with(|p| p.points.clone());
            state.with(|s| calib::matching(&points, &s.model, &s.workload, &rt))
        });
        PageContext {
            state,
            profiles,
            notes,
            theme,
            runtime,
            profile,
            curve,
            curve_progress: RwSignal::new(None),
            curve_refining: RwSignal::new(false),
            curve_for,
            curve_key,
            bands: Memo::new(move |_| curve.with(bands)),
            likely: Memo::new(move |_| {
                curve.with(|c| state.with(|s| likely_band(c, &s.model.arch, &s.workload)))
            }),
            point,
            point_pending,
            measured,
            fit: RwSignal::new(None),
            fit_pending: RwSignal::new(true),
            registry: RwSignal::new(None),
        }
    }

    /// Applies a workload change after the core validates it; the error
    /// (naming the field and its range) is returned for inline display.
    pub fn apply(&self, f: impl FnOnce(&mut Workload)) -> Result<(), String> {
        perf::input();
        let mut w = self.state.with_untracked(|s| s.workload.clone());
        f(&mut w);
        w.validate().map_err(|e| e.to_string())?;
        self.state.update(|s| s.workload = w);
        Ok(())
    }

    /// Changes the state (an input handler).
    pub fn update(&self, f: impl FnOnce(&mut AppState)) {
        perf::input();
        self.state.update(f);
    }

    /// Whether the curve on hand was computed for the current inputs (if
    /// not, a new one is being computed and will trigger another redraw).
    pub fn curve_is_current(&self) -> bool {
        self.curve.track();
        let key = self.curve_key.get();
        let rt = self.runtime.get();
        self.curve_for
            .with_value(|f| f.as_ref().is_some_and(|(k, r)| *k == key && *r == rt))
    }

    /// The link to the current state.
    pub fn link(&self) -> String {
        page_url(&self.state.with(jobs::url_key))
    }
}

/// The page's query: `?…`, or `#…` where a host drops queries.
fn location_query() -> String {
    let loc = window().location();
    let search = loc.search().unwrap_or_default();
    if search.len() > 1 {
        search
    } else {
        loc.hash().unwrap_or_default()
    }
}

/// This page's address with `query`.
pub fn page_url(query: &str) -> String {
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
