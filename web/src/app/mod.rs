//! The Leptos page (wasm32 only).
//!
//! [`App`] provides one [`PageContext`] (signals holding the
//! [`crate::state::AppState`] and what is computed from it), starts the
//! jobs that follow it (`crate::jobs::run`), and lays out the panels, one
//! file each:
//!
//! - [`header`]: title, share link, theme, notes about the link;
//! - [`model`]: preset picker, architecture fields, config.json import;
//! - [`workload`]: mode, batch, length and the workload's options;
//! - [`calibration`]: the calibration profile and its runtime figures,
//!   with [`registry`]'s list of the profile registry's profiles;
//! - [`chart`]: the curve, its settings, tooltip and exports;
//! - [`breakdown`]: the estimate at the chosen length;
//! - [`timeline`]: memory over the job at the chosen length, on demand;
//! - [`gpu_table`]: which GPUs fit, from the likely range plus a margin,
//!   and [`advice`]: what would make the job fit a card it does not.
//!
//! [`fields`] holds the labelled inputs the panels share.

pub mod breakdown;
pub mod calibration;
pub mod context;
pub mod fields;
pub mod gpu_table;
pub mod header;
pub mod lazy;
pub mod model;
pub mod perf;
pub mod workload;

pub use crate::chart::panel::last_export;
pub use context::{use_page, PageContext};

use crate::chart::panel::ChartPanel;
use breakdown::BreakdownPanel;
use calibration::CalibrationPanel;
use gpu_table::FitPanel;
use header::Header;
use leptos::prelude::*;
use model::ModelPanel;
use workload::WorkloadPanel;

/// Mounts the page on `<body>`, reading the state from the URL.
pub fn mount() {
    leptos::mount::mount_to_body(App);
}

/// The whole page.
#[component]
pub fn App() -> impl IntoView {
    let page = PageContext::from_location();
    provide_context(page);
    crate::registry::panel::start(page);
    crate::jobs::run::start(page);

    let theme = page.theme;
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
            <Header/>
            <main class="layout">
                <section class="controls" aria-label="Model and workload">
                    <ModelPanel/>
                    <WorkloadPanel/>
                    <CalibrationPanel/>
                </section>
                <section class="results" aria-label="Results">
                    <ChartPanel/>
                    <BreakdownPanel/>
                    <crate::timeline::panel::TimelinePanel/>
                    <FitPanel/>
                </section>
            </main>
            <footer class="footer">
                "Every figure comes from headroom-core: a replay of the tensors PyTorch allocates through a model of its caching allocator, plus the CUDA context and libraries of the calibration profile. GB = 10"<sup>"9"</sup>" bytes."
            </footer>
        </div>
    }
}
