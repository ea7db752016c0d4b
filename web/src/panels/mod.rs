//! The panels module (wasm32 only): the advice and timeline panels'
//! bodies, with the core's suggestions, the timeline replay, its chart and
//! its exports, and the config.json importer. The page's own module leaves
//! them out: the `headroom-panels` binary exports [`show_advice`],
//! [`show_timeline`], [`close_advice`], [`close_timeline`], [`import_config`]
//! and [`import_framework`], and the page fetches it the first time one of them
//! is asked for (`crate::app::lazy`). Each call gives the panel's container
//! and what it shows as plain data (the job as spec JSON): the first call
//! for a container mounts the body there, later ones update it.

use crate::advice::body::{AdviceBody, AdviceRequest};
use crate::app::lazy::{self, PanelsModule};
use crate::chart::Theme;
use crate::protocol::Inputs;
use crate::timeline::body::TimelineBody;
use leptos::prelude::*;
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use web_sys::HtmlElement;

/// A body mounted in a panel's container, and the signals it reads.
struct Mounted<S> {
    container: HtmlElement,
    signals: S,
    /// Unmounts the body when dropped (before its owner).
    _view: Box<dyn Any>,
    _owner: Owner,
}

type AdviceSignals = (RwSignal<Result<AdviceRequest, String>>, RwSignal<bool>);
type TimelineSignals = (
    RwSignal<Result<Inputs, String>>,
    RwSignal<Theme>,
    RwSignal<String>,
);

thread_local! {
    static ADVICE: RefCell<Option<Mounted<AdviceSignals>>> = const { RefCell::new(None) };
    static TIMELINE: RefCell<Option<Mounted<TimelineSignals>>> = const { RefCell::new(None) };
}

/// Sets `signal` to `value` unless it holds it already.
fn set_if_changed<T: PartialEq + Send + Sync + 'static>(signal: RwSignal<T>, value: T) {
    if signal.with_untracked(|v| *v != value) {
        signal.set(value);
    }
}

/// Mounts `body` in `container` under an owner of its own, with `signals`
/// created under that owner.
fn mount<S: Copy + 'static, V: IntoView + 'static>(
    container: HtmlElement,
    signals: impl FnOnce() -> S,
    body: impl FnOnce(S) -> V + 'static,
) -> Mounted<S> {
    let owner = Owner::new();
    let (signals, view) = owner.with(|| {
        let signals = signals();
        let view = leptos::mount::mount_to(container.clone(), move || body(signals));
        (signals, Box::new(view) as Box<dyn Any>)
    });
    Mounted {
        container,
        signals,
        _view: view,
        _owner: owner,
    }
}

/// Shows the suggestions for the job and card of `request`
/// (`Inputs::to_json_with`, plus `gpu` and `margin_pct`) in `container`;
/// `fits_already` says whether the GPU table has the job fit the card.
pub fn show_advice(container: HtmlElement, request: &str, fits_already: bool) {
    let request = AdviceRequest::from_json(request);
    ADVICE.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref().filter(|m| m.container == container) {
            Some(m) => {
                set_if_changed(m.signals.0, request);
                set_if_changed(m.signals.1, fits_already);
            }
            None => {
                *slot = None;
                *slot = Some(mount(
                    container,
                    move || (RwSignal::new(request), RwSignal::new(fits_already)),
                    |(request, fits_already)| {
                        view! { <AdviceBody request=request.into() fits_already=fits_already.into()/> }
                    },
                ));
            }
        }
    });
}

/// Shows memory over the job of `request` (`Inputs::to_json_with`) in
/// `container`, drawn in the `theme` named (`light` or `dark`), its exports
/// named from `file_stem`.
pub fn show_timeline(container: HtmlElement, request: &str, theme: &str, file_stem: &str) {
    let request = Inputs::from_json(request).map(|(inputs, _)| inputs);
    let theme = if theme == "dark" {
        Theme::Dark
    } else {
        Theme::Light
    };
    let file_stem = file_stem.to_string();
    TIMELINE.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.as_ref().filter(|m| m.container == container) {
            Some(m) => {
                set_if_changed(m.signals.0, request);
                set_if_changed(m.signals.1, theme);
                set_if_changed(m.signals.2, file_stem);
            }
            None => {
                *slot = None;
                *slot = Some(mount(
                    container,
                    move || {
                        (
                            RwSignal::new(request),
                            RwSignal::new(theme),
                            RwSignal::new(file_stem),
                        )
                    },
                    |(request, theme, file_stem)| {
                        view! { <TimelineBody request=request.into() theme=theme.into() file_stem=file_stem.into()/> }
                    },
                ));
            }
        }
    });
}

/// A config.json's text as the JSON text of the model it describes, or
/// why not (`crate::import`).
pub fn import_config(source: &str, hub_id: Option<&str>) -> Result<String, String> {
    crate::import::model_from_config(source, hub_id)
        .map(|model| crate::import::model_json(&model).to_string())
}

/// The workload that the framework of `request` (`Inputs::to_json_with`,
/// plus `framework` and the pasted `arguments`) runs at the request's
/// length, as the workload's JSON text, or why not (`crate::import`).
pub fn import_framework(request: &str) -> Result<String, String> {
    let (inputs, v) = Inputs::from_json(request)?;
    let text = |key: &str| v.get(key).and_then(serde_json::Value::as_str).unwrap_or("");
    let length = inputs.workload.length(inputs.arch.is_vision());
    let workload = crate::import::workload_from_framework(
        &inputs.arch,
        length,
        text("framework"),
        text("arguments"),
    )?;
    serde_json::to_string(&workload).map_err(|e| e.to_string())
}

/// Unmounts the suggestions (their panel closed).
pub fn close_advice() {
    ADVICE.with(|slot| slot.borrow_mut().take());
}

/// Unmounts the timeline (its panel closed).
pub fn close_timeline() {
    TIMELINE.with(|slot| slot.borrow_mut().take());
}

/// The panels computed and drawn by this module itself, not a second one
/// (the browser tests, which build the page's library as one module).
struct InThisModule;

impl PanelsModule for InThisModule {
    fn show_advice(
        &self,
        container: &HtmlElement,
        request: &str,
        fits_already: bool,
    ) -> Result<(), String> {
        show_advice(container.clone(), request, fits_already);
        Ok(())
    }

    fn show_timeline(
        &self,
        container: &HtmlElement,
        request: &str,
        theme: &str,
        file_stem: &str,
    ) -> Result<(), String> {
        show_timeline(container.clone(), request, theme, file_stem);
        Ok(())
    }

    fn import_config(&self, source: &str, hub_id: Option<&str>) -> Result<String, String> {
        import_config(source, hub_id)
    }

    fn import_framework(&self, request: &str) -> Result<String, String> {
        import_framework(request)
    }

    fn close_advice(&self) {
        close_advice();
    }

    fn close_timeline(&self) {
        close_timeline();
    }
}

/// Makes the page show its panels from this module instead of fetching
/// the panels module (for the browser tests).
pub fn show_panels_in_this_module() {
    lazy::set_loaded(Rc::new(InThisModule));
}
