//! What would make the job fit a card: the core's suggestions
//! (`headroom_core::advice::advise`, as `gpus --advise` prints them), each
//! with its new peak and what it costs the user.

use crate::format;
use crate::protocol::Inputs;
use headroom_core::advice::{advise, Suggestion};
use headroom_core::gpus::{self, Gpu};
use headroom_core::Bytes;
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
    }
    }
}
