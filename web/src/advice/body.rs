//! What would make the job fit a card: the core's suggestions
//! (`headroom_core::advice::advise`, as `gpus --advise` prints them), each
//! with its new peak and what it costs the user.

use super::{applied_query, changes_in_words};
use crate::format;
use crate::protocol::Inputs;
use headroom_core::advice::{advise, Suggestion};
use headroom_core::gpus::{self, Gpu};
use headroom_core::workload::Workload;
use headroom_core::{Bytes, RuntimeProfile};
use leptos::prelude::*;
use std::time::Duration;

/// What the suggestions are asked for: the job and the card.
#[derive(Clone, Debug, PartialEq)]
pub struct AdviceRequest {
    /// Model, workload, runtime.
    pub inputs: Inputs,
    /// The catalog card.
    pub gpu: &'static Gpu,
    /// The fragmentation margin, percent.
    pub margin_pct: u32,
}

impl AdviceRequest {
    /// Reads what the page sends (`Inputs::to_json_with`, plus `gpu` and
    /// `margin_pct`).
    pub fn from_json(text: &str) -> Result<AdviceRequest, String> {
        let (inputs, v) = Inputs::from_json(text)?;
        let gpu = v
            .get("gpu")
            .and_then(serde_json::Value::as_str)
            .and_then(gpus::find)
            .ok_or("`gpu`: not a catalog card")?;
        let margin_pct = v
            .get("margin_pct")
            .and_then(serde_json::Value::as_u64)
            .ok_or("`margin_pct`: not a percentage")?
            .min(u64::from(crate::defaults::MAX_MARGIN_PCT)) as u32;
        Ok(AdviceRequest {
            inputs,
            gpu,
            margin_pct,
        })
    }
}

/// The suggestions for `request`'s card, or why there are none;
/// `fits_already` says whether the GPU table has the job fit the card.
#[component]
pub fn AdviceBody(
    request: Signal<Result<AdviceRequest, String>>,
    fits_already: Signal<bool>,
) -> impl IntoView {
    // `None` while the suggestions are computed.
    let advice = RwSignal::new(None::<Result<Vec<Suggestion>, String>>);
    let runs = StoredValue::new(0u64);
    // The job the suggestions change: their words and Apply links.
    let before = StoredValue::new(None::<(Workload, RuntimeProfile, bool)>);
    Effect::new(move |_| {
        let request = request.get();
        runs.update_value(|n| *n += 1);
        let ticket = runs.get_value();
        advice.set(None);
        let request = match request {
            Ok(request) => request,
            Err(e) => return advice.set(Some(Err(e))),
        };
        let Inputs {
            arch,
            workload: w,
            runtime: rt,
        } = request.inputs;
        before.set_value(Some((w.clone(), rt.clone(), arch.is_vision())));
        if crate::jobs::is_slow(&arch, &w) {
            advice.set(Some(Err(
                "this job takes too long to replay for the page to try changes: `headroom gpus --advise` answers on the command line".into(),
            )));
            return;
        }
        // After the browser has shown that they are being computed.
        set_timeout(
            move || {
                if runs.try_get_value() == Some(ticket) {
                    let result = advise(&arch, &w, &rt, request.gpu, request.margin_pct)
                        .map_err(|e| e.to_string());
                    advice.try_set(Some(result));
                }
            },
            Duration::from_millis(20),
        );
    });
    move || {
        match advice.get() {
        None => view! { <p class="hint" role="status" data-testid="advice-pending">"Trying one change at a time…"</p> }.into_any(),
        Some(Err(e)) => view! { <p class="error" data-testid="advice-error">{format::shown(&e, 600)}</p> }.into_any(),
        Some(Ok(list)) if list.is_empty() => {
            let text = if fits_already.get() {
                "It fits as it is."
            } else {
                "No single change tried makes it fit (allocator, optimizer kernel, attention, chunking, checkpointing, KV cache, bf16, LoRA, batch, length, more GPUs)."
            };
            view! { <p class="hint" data-testid="advice-none">{text}</p> }.into_any()
        }
        Some(Ok(list)) => {
            let Some((w, rt, vision)) = before.get_value() else {
                return ().into_any();
            };
            let query = web_sys::window()
                .and_then(|win| win.location().search().ok())
                .unwrap_or_default();
            view! {
            <ol class="suggestions" data-testid="suggestions">
                {list.into_iter().map(|s| {
                    let words = changes_in_words((&w, &rt), (&s.workload, &s.runtime), vision).join("; ");
                    let apply = applied_query(&query, &s.workload, s.runtime != rt);
                    view! {
                    <li data-testid="suggestion">
                        <span data-testid="suggestion-words">{words}</span>
                        <span>" → peak "<strong data-testid="suggestion-peak">{format::bytes(Bytes(s.driver_peak))}</strong>" per GPU"</span>
                        <span class="cost">"Costs "{s.change.cost()}"."</span>
                        {match apply {
                            Some(q) => {
                                // The link as the suggestions were shown; on a
                                // click, the page's link as it is now (it
                                // follows the state a moment later).
                                let workload = s.workload.clone();
                                let follow = move |ev: leptos::ev::MouseEvent| {
                                    let now = web_sys::window()
                                        .and_then(|win| win.location().search().ok())
                                        .and_then(|query| applied_query(&query, &workload, false));
                                    if let (Some(q), Some(win)) = (now, web_sys::window()) {
                                        ev.prevent_default();
                                        let _ = win.location().set_search(&q);
                                    }
                                };
                                view! { <a class="button" data-testid="suggestion-apply" href=format!("?{q}") on:click=follow>"Apply"</a> }.into_any()
                            }
                            None => view! { <span class="hint" data-testid="suggestion-no-apply">" Set it where you run the job: the page has no field for it."</span> }.into_any(),
                        }}
                        <details><summary>"As spec keys"</summary><code>{s.what.clone()}</code></details>
                    </li>
                }}).collect_view()}
            </ol>
            }.into_any()
        }
    }
    }
}
