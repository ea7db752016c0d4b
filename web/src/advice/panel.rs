//! What would make the job fit a card: the core's suggestions
//! (`headroom_core::advice::advise`, as `gpus --advise` prints them), each
//! with its new peak and what it costs the user. Opened from a "does not
//! fit" in the GPU table; the link carries the card (`advise=GPU`). The
//! suggestions come from the panels module (`crate::advice::body`).

use crate::app::context::use_page;
use crate::app::lazy::{self, ModuleState};
use crate::format;
use crate::protocol::Inputs;
use headroom_core::gpus;
use headroom_core::Bytes;
use leptos::html;
use leptos::prelude::*;
use leptos::task::spawn_local;

/// "does not fit", as a button that opens the suggestions for `gpu_id`;
/// its accessible name names the card (a screen reader lists every row's).
pub fn advise_link(gpu_id: &'static str) -> impl IntoView {
    let page = use_page();
    let name = gpus::find(gpu_id).map_or(gpu_id, |g| g.name);
    view! {
        <button type="button" class="link" data-testid=format!("advise-{gpu_id}")
            title="What would make it fit this card"
            aria-label=format!("Does not fit the {name}: what would make it fit")
            on:click=move |_| page.update(|s| s.panels.advise = Some(gpu_id.to_string()))>
            "does not fit"
        </button>
    }
}

/// The suggestions for the card the state names, below the GPU table;
/// the panels module computes and shows them (`crate::app::lazy`).
#[component]
pub fn AdvicePanel() -> impl IntoView {
    let page = use_page();
    let card = Memo::new(move |_| {
        page.state
            .with(|s| s.panels.advise.as_deref().and_then(gpus::find))
    });
    let request = Memo::new(move |_| {
        let gpu = card.get()?;
        let runtime = page.runtime.get();
        Some(page.state.with(|s| {
            Inputs {
                arch: s.model.arch.clone(),
                workload: s.workload.clone(),
                runtime,
            }
            .to_json_with(&[("gpu", gpu.id.into()), ("margin_pct", s.margin_pct.into())])
        }))
    });
    let fits_already = Memo::new(move |_| {
        let Some(gpu) = card.get() else { return false };
        page.fit.with(|rows| {
            rows.as_ref().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r.gpu.id == gpu.id && r.jobs.unwrap_or(0) > 0)
            })
        })
    });
    // Focus moves to the panel when it opens, so that a keyboard or a
    // screen reader lands on the suggestions.
    let section: NodeRef<html::Section> = NodeRef::new();
    Effect::new(move |_| {
        if let (Some(_), Some(section)) = (card.get(), section.get()) {
            let _ = section.focus();
        }
    });
    let body: NodeRef<html::Div> = NodeRef::new();
    let module = RwSignal::new(ModuleState::Loading);
    Effect::new(move |_| {
        let (Some(request), Some(container)) = (request.get(), body.get()) else {
            if let Some(panels) = lazy::loaded() {
                panels.close_advice();
            }
            return;
        };
        let fits_already = fits_already.get();
        spawn_local(async move {
            let shown = match lazy::panels().await {
                Ok(panels) => panels.show_advice(&container, &request, fits_already),
                Err(e) => Err(e),
            };
            module.set(shown.map_or_else(ModuleState::Failed, |()| ModuleState::Ready));
        });
    });
    move || {
        card.get().map(|gpu| {
            view! {
                <section class="advice" data-testid="advice" aria-label="What would make it fit" tabindex="-1" node_ref=section>
                    <h3>{format!("What would make it fit {} ({} usable)", gpu.name, format::bytes(Bytes(gpu.usable_bytes)))}</h3>
                    {move || match module.get() {
                        ModuleState::Loading => Some(view! { <p class="hint" role="status" data-testid="advice-pending">"Trying one change at a time…"</p> }.into_any()),
                        ModuleState::Failed(e) => Some(view! { <p class="error" data-testid="advice-error">{format::shown(&e, 600)}</p> }.into_any()),
                        ModuleState::Ready => None,
                    }}
                    <div node_ref=body></div>
                    <p class="hint">"One change at a time, each an exact estimate that fits the card as the table decides; first what leaves the model's math alone."</p>
                    <button type="button" data-testid="advice-close" on:click=move |_| page.update(|s| s.panels.advise = None)>"Close"</button>
                </section>
            }
        })
    }
}
