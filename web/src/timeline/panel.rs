//! Memory over the job at the chosen length: allocated and reserved bytes
//! over the job's allocations and frees (the core's timeline), its phases
//! shaded and labelled, the peak marked, what is live at the peak, and PNG
//! and CSV exports. Opened on demand (`timeline=1` in the link): it is one
//! more replay of the job, with a timeline, which the panels module
//! computes and draws (`crate::timeline::body`).

use crate::app::context::{state_memo, use_page};
use crate::app::lazy::{self, ModuleState};
use crate::chart::panel::file_stem;
use crate::chart::Theme;
use crate::format;
use crate::protocol::Inputs;
use leptos::html;
use leptos::prelude::*;
use leptos::task::spawn_local;

/// The panel's heading and its toggle; when the state says it is open, the
/// timeline chart, its table of what is live at the peak, and its exports.
#[component]
pub fn TimelinePanel() -> impl IntoView {
    let page = use_page();
    let open = state_memo(page, |s| s.panels.timeline);
    let request = Memo::new(move |_| {
        let runtime = page.runtime.get();
        page.state.with(|s| {
            Inputs {
                arch: s.model.arch.clone(),
                workload: s.workload.clone(),
                runtime,
            }
            .to_json_with(&[])
        })
    });
    let stem = state_memo(page, file_stem);
    let body: NodeRef<html::Div> = NodeRef::new();
    let module = RwSignal::new(ModuleState::Loading);
    Effect::new(move |_| {
        let (open, container) = (open.get(), body.get());
        let Some(container) = container.filter(|_| open) else {
            if let Some(panels) = lazy::loaded() {
                panels.close_timeline();
            }
            return;
        };
        let request = request.get();
        let theme = match page.theme.get().resolve() {
            Theme::Dark => "dark",
            Theme::Light => "light",
        };
        let stem = stem.get();
        spawn_local(async move {
            let shown = match lazy::panels().await {
                Ok(panels) => panels.show_timeline(&container, &request, theme, &stem),
                Err(e) => Err(e),
            };
            module.set(shown.map_or_else(ModuleState::Failed, |()| ModuleState::Ready));
        });
    });

    view! {
        <div class="panel timeline" data-testid="timeline-panel">
            <h2>"Memory over the job"</h2>
            <button type="button" data-testid="timeline-toggle" aria-expanded=move || open.get().to_string()
                on:click=move |_| page.update(|s| s.panels.timeline = !s.panels.timeline)>
                {move || if open.get() { "Hide the timeline" } else { "Show allocated and reserved memory over the job at the chosen length" }}
            </button>
            <Show when=move || open.get()>
                {move || match module.get() {
                    ModuleState::Loading => Some(view! { <p class="hint" role="status" data-testid="timeline-pending">"Replaying the job with its timeline…"</p> }.into_any()),
                    ModuleState::Failed(e) => Some(view! { <p class="error" data-testid="timeline-error">{format::shown(&e, 600)}</p> }.into_any()),
                    ModuleState::Ready => None,
                }}
                <div node_ref=body></div>
            </Show>
        </div>
    }
}
