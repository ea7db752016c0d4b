//! Labelled inputs the panels share.

use super::context::use_page;
use crate::format;
use headroom_core::workload::Workload;
use leptos::prelude::*;

/// A labelled `<select>`.
pub fn select_field(
    id: &'static str,
    label: &'static str,
    options: Vec<(&'static str, &'static str)>,
    current: impl Fn() -> String + Send + Sync + 'static + Copy,
    on_pick: impl Fn(String) + 'static,
) -> AnyView {
    let current: std::sync::Arc<dyn Fn() -> String + Send + Sync> = std::sync::Arc::new(current);
    select_field_of(id, label, options, current, Box::new(on_pick))
}

#[allow(clippy::type_complexity)]
fn select_field_of(
    id: &'static str,
    label: &'static str,
    options: Vec<(&'static str, &'static str)>,
    current: std::sync::Arc<dyn Fn() -> String + Send + Sync>,
    on_pick: Box<dyn Fn(String)>,
) -> AnyView {
    view! {
        <div class="field">
            <label for=id>{label}</label>
            <select id=id data-testid=id on:change=move |ev| on_pick(event_target_value(&ev))>
                {options
                    .into_iter()
                    .map(|(value, text)| {
                        let current = current.clone();
                        view! { <option value=value prop:selected=move || current() == value>{text}</option> }
                    })
                    .collect_view()}
            </select>
        </div>
    }
    .into_any()
}

/// A labelled number input with an inline error from the core's validation.
pub fn number_field(
    id: &'static str,
    label: &'static str,
    min: u64,
    max: u64,
    current: impl Fn() -> String + Send + Sync + 'static,
    on_set: impl Fn(&str) -> Result<(), String> + 'static,
) -> AnyView {
    // One copy of the view for every number input (a smaller bundle).
    number_field_of(id, label, min, max, Box::new(current), Box::new(on_set))
}

#[allow(clippy::type_complexity)]
fn number_field_of(
    id: &'static str,
    label: &'static str,
    min: u64,
    max: u64,
    current: Box<dyn Fn() -> String + Send + Sync>,
    on_set: Box<dyn Fn(&str) -> Result<(), String>>,
) -> AnyView {
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
                {move || error.get().map(said)}
            </span>
        </div>
    }
    .into_any()
}

/// `text` as an integer of `min..=max`, or an error naming `field`.
pub fn parse_u32(field: &str, text: &str, min: u64, max: u64) -> Result<u32, String> {
    match text.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v as u32),
        _ => {
            let problem = if text.is_empty() {
                "nothing typed".into()
            } else {
                format!(
                    "“{}” is out of range or not a whole number",
                    format::shown(text, 40)
                )
            };
            Err(format!(
                "`{field}`: {problem}; allowed: an integer from {min} to {max}"
            ))
        }
    }
}

/// A message in the page's words (`crate::words::plain`), with the
/// message as the core wrote it in a details line below.
pub fn said(message: String) -> AnyView {
    let said = crate::words::plain(&message);
    view! {
        {said.text}
        {said.detail.map(|d| view! { <small class="detail" data-testid="detail">{d}</small> })}
    }
    .into_any()
}

/// Reads the text of `file` (`what` it is, for the messages) and hands it
/// to `then`: refused unread above `max` bytes, refused where its bytes are
/// not UTF-8 (`crate::intake`).
pub fn read_file_text(
    file: web_sys::File,
    what: &str,
    max: u64,
    then: impl FnOnce(Result<String, String>) + 'static,
) {
    let what = crate::intake::file_label(what, &file.name());
    if let Err(e) = crate::intake::check_size(&what, file.size() as u64, max) {
        then(Err(e));
        return;
    }
    let promise = file.array_buffer();
    leptos::task::spawn_local(async move {
        match wasm_bindgen_futures::JsFuture::from(promise).await {
            Ok(buffer) => {
                let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
                then(crate::intake::utf8(&what, bytes));
            }
            Err(_) => then(Err(format!("{what} could not be read"))),
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
) -> AnyView {
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

/// A labelled checkbox (one copy of the view for every checkbox).
#[allow(clippy::type_complexity)]
pub fn checkbox(
    id: &'static str,
    label: &'static str,
    checked: Box<dyn Fn() -> bool + Send + Sync>,
    on_change: Box<dyn Fn(bool)>,
) -> AnyView {
    view! {
        <div class="field check">
            <input id=id data-testid=id type="checkbox"
                prop:checked=checked
                on:change=move |ev| on_change(event_target_checked(&ev))/>
            <label for=id>{label}</label>
        </div>
    }
    .into_any()
}

/// A checkbox of a workload field, set through the core's validation.
pub fn check_field(
    id: &'static str,
    label: &'static str,
    get: fn(&Workload) -> bool,
    set: fn(&mut Workload, bool),
) -> AnyView {
    let page = use_page();
    checkbox(
        id,
        label,
        Box::new(move || page.state.with(|s| get(&s.workload))),
        Box::new(move |on| {
            let _ = page.apply(|w| set(w, on));
        }),
    )
}
