//! What would make the job fit a card: the core's suggestions
//! (`headroom_core::advice::advise`, as `gpus --advise` prints them), each
//! with its new peak and what it costs the user. Opened from a "does not
//! fit" in the GPU table; the link carries the card (`advise=GPU`).

use super::context::use_page;
use crate::format;
use headroom_core::advice::{advise, Suggestion};
use headroom_core::gpus;
use headroom_core::Bytes;
use leptos::prelude::*;
use std::time::Duration;

/// "does not fit", as a button that opens the suggestions for `gpu_id`.
pub fn advise_link(gpu_id: &'static str) -> impl IntoView {
    let page = use_page();
    view! {
        <button type="button" class="link" data-testid=format!("advise-{gpu_id}")
            title="What would make it fit this card"
            on:click=move |_| page.update(|s| s.panels.advise = Some(gpu_id.to_string()))>
            "does not fit"
        </button>
    }
}

/// The suggestions for the card the state names, below the GPU table.
#[component]
pub fn AdvicePanel() -> impl IntoView {
    let page = use_page();
    let card = Memo::new(move |_| {
        page.state
            .with(|s| s.panels.advise.as_deref().and_then(gpus::find))
    });
    let job = Memo::new(move |_| {
        page.state
            .with(|s| (s.model.arch.clone(), s.workload.clone(), s.margin_pct))
    });
    // `None` while the suggestions are computed.
    let advice = RwSignal::new(None::<Result<Vec<Suggestion>, String>>);
    let runs = StoredValue::new(0u64);
    Effect::new(move |_| {
        let Some(gpu) = card.get() else { return };
        let (arch, w, margin) = job.get();
        let rt = page.runtime.get();
        runs.update_value(|n| *n += 1);
        let ticket = runs.get_value();
        advice.set(None);
        if crate::jobs::is_slow(&arch, &w) {
            advice.set(Some(Err(
                "this job takes too long to replay for the page to try changes: `calibration-collector gpus --advise` answers on the command line".into(),
            )));
            return;
        }
        // After the browser has shown that they are being computed.
        set_timeout(
            move || {
                if runs.try_get_value() == Some(ticket) {
                    let result = advise(&arch, &w, &rt, gpu, margin).map_err(|e| e.to_string());
                    advice.try_set(Some(result));
                }
            },
            Duration::from_millis(20),
        );
    });
    let fits_already = move |id: &str| {
        page.fit.with(|rows| {
            rows.as_ref().is_some_and(|rows| {
                rows.iter()
                    .any(|r| r.gpu.id == id && r.jobs.unwrap_or(0) > 0)
            })
        })
    };
    move || {
        card.get().map(|gpu| {
            let body = match advice.get() {
                None => view! { <p class="hint" role="status" data-testid="advice-pending">"Trying one change at a time…"</p> }.into_any(),
                Some(Err(e)) => view! { <p class="error" data-testid="advice-error">{format::shown(&e, 600)}</p> }.into_any(),
                Some(Ok(list)) if list.is_empty() => {
                    let text = if fits_already(gpu.id) {
                        "It fits as it is."
                    } else {
                        "No single change tried makes it fit (allocator, optimizer kernel, attention, chunking, checkpointing, KV cache, bf16, LoRA, batch, length, more GPUs)."
                    };
                    view! { <p class="hint" data-testid="advice-none">{text}</p> }.into_any()
                }
                Some(Ok(list)) => view! {
                    <ol class="suggestions" data-testid="suggestions">
                        {list.into_iter().map(|s| view! {
                            <li data-testid="suggestion">
                                <code>{s.what.clone()}</code>
                                <span>" → peak "<strong data-testid="suggestion-peak">{format::bytes(Bytes(s.driver_peak))}</strong>" per GPU"</span>
                                <span class="cost">"Costs "{s.change.cost()}"."</span>
                            </li>
                        }).collect_view()}
                    </ol>
                }.into_any(),
            };
            view! {
                <section class="advice" data-testid="advice" aria-label="What would make it fit">
                    <h3>{format!("What would make it fit {} ({} usable)", gpu.name, format::bytes(Bytes(gpu.usable_bytes)))}</h3>
                    {body}
                    <p class="hint">"One change at a time, each an exact estimate that fits the card as the table decides; first what leaves the model's math alone."</p>
                    <button type="button" data-testid="advice-close" on:click=move |_| page.update(|s| s.panels.advise = None)>"Close"</button>
                </section>
            }
        })
    }
}
