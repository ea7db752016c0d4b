//! Labelled inputs the panels share.

use super::context::use_page;
use headroom_core::workload::Workload;
use leptos::prelude::*;

/// A labelled `<select>`.
pub fn select_field(
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
pub fn number_field(
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

/// `text` as an integer of `min..=max`, or an error naming `field`.
pub fn parse_u32(field: &str, text: &str, min: u64, max: u64) -> Result<u32, String> {
    match text.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v as u32),
        _ => Err(format!(
            "`{field}`: `{text}` is not accepted; allowed: an integer from {min} to {max}"
        )),
    }
}

/// Reads a file's text and hands it to `then`.
pub fn read_file_text(file: web_sys::File, then: impl FnOnce(String) + 'static) {
    let promise = file.text();
    leptos::task::spawn_local(async move {
        if let Ok(v) = wasm_bindgen_futures::JsFuture::from(promise).await {
            then(v.as_string().unwrap_or_default());
        }
    });
}

/// A labelled `<select>` of a workload field: each option's value is the
/// core's key of its variant (the URL's and the spec's word). `get` gives
/// the field's key; `set` sets the field from a key (an unknown one leaves
/// it). One function for every such select keeps the page's code small.
pub fn choice_field(
    id: &'static str,
    label: &'static str,
    options: Vec<(&'static str, &'static str)>,
    get: fn(&Workload) -> &'static str,
    set: fn(&mut Workload, &str),
) -> impl IntoView {
    let page = use_page();
    select_field(
        id,
        label,
        options,
        move || page.state.with(|s| get(&s.workload).to_string()),
        move |v| {
            let _ = page.apply(|w| set(w, &v));
        },
    )
}
