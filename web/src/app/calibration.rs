//! The calibration panel: the profile (bundled, loaded, or one of the
//! profile registry's), its runtime figures, and loading a profile the
//! collector wrote.

use super::context::use_page;
use super::fields::{read_file_text, said};
use crate::calib;
use crate::format;
use crate::intake;
use crate::registry::panel as registry;
use leptos::prelude::*;
use web_sys::HtmlInputElement;

/// Most characters of a profile's or its GPU's name shown (a loaded file
/// names them).
const NAME_CHARS: usize = 80;

/// The calibration profile, its runtime figures, and loading one.
#[component]
pub fn CalibrationPanel() -> impl IntoView {
    let page = use_page();
    // The pasted text lives in the textarea alone (read when loaded).
    let paste: NodeRef<leptos::html::Textarea> = NodeRef::new();
    let status = RwSignal::new(None::<Result<String, String>>);
    // The GPU whose registry profiles the select lists (empty: every GPU).
    let registry_gpu = RwSignal::new(String::new());
    let load = move |text: String| {
        let checked = intake::check_json_text("the profile", &text, intake::MAX_PROFILE_BYTES);
        let parsed = checked.and_then(|()| calib::parse_profile(&text, calib::LOADED_ID));
        match parsed {
            Ok(p) => {
                let msg = format!(
                    "Loaded “{}”: {} measured points.",
                    format::shown(&p.name, NAME_CHARS),
                    p.points.len()
                );
                page.profiles.update(|ps| {
                    ps.retain(|x| x.id != calib::LOADED_ID);
                    ps.push(p);
                });
                page.update(|s| s.profile = calib::LOADED_ID.into());
                status.set(Some(Ok(msg)));
            }
            Err(e) => status.set(Some(Err(format::shown(&e, 600)))),
        }
    };
    let on_file = move |ev: leptos::ev::Event| {
        let input: HtmlInputElement = event_target(&ev);
        if let Some(file) = input.files().and_then(|f| f.get(0)) {
            read_file_text(
                file,
                "the profile",
                intake::MAX_PROFILE_BYTES,
                move |text| match text {
                    Ok(text) => load(text),
                    Err(e) => status.set(Some(Err(e))),
                },
            );
        }
        // The same file picked again is read again.
        input.set_value("");
    };
    let figures = move || {
        let rt = page.runtime.get();
        let rows = [
            ("CUDA context", rt.cuda_context_bytes),
            ("cuBLAS handle + kernels", rt.cublas_library_bytes),
            ("cuBLAS workspace", rt.cublas_workspace_bytes),
            ("model kernels", rt.model_kernels_bytes),
            ("backward thread", rt.backward_library_bytes),
            ("cuDNN", rt.cudnn_library_bytes),
        ];
        let alloc = if rt.allocator.expandable_segments {
            "expandable segments"
        } else {
            "default"
        };
        view! {
            <table class="figures" data-testid="runtime-figures">
                <caption>{format!("Runtime figures ({})", rt.gpu.as_deref().map_or_else(|| "unnamed GPU".into(), |g| format::shown(g, NAME_CHARS)))}</caption>
                <tbody>
                    {rows.into_iter().map(|(k, v)| view! { <tr><th scope="row">{k}</th><td>{format::mib(headroom_core::Bytes(v))}</td></tr> }).collect_view()}
                    <tr><th scope="row">"allocator"</th><td>{alloc}</td></tr>
                </tbody>
            </table>
        }
    };
    view! {
        <fieldset class="group">
            <legend>"Calibration profile"</legend>
            <div class="field">
                <label for="profile">"Profile"</label>
                <select id="profile" data-testid="profile" on:change=move |ev| registry::choose(page, status, event_target_value(&ev))>
                    {move || {
                        let current = page.state.with(|s| s.profile.clone());
                        let mut options: Vec<(String, String)> = page.profiles.with(|ps| {
                            ps.iter().map(|p| (p.id.clone(), format!("{} ({}, {} points)", format::shown(&p.name, NAME_CHARS), calib::source_of(&p.id), p.points.len()))).collect()
                        });
                        options.extend(registry::profile_options(page, &registry_gpu.get()));
                        options.into_iter().map(|(id, text)| {
                            let selected = id == current;
                            view! { <option value=id selected=selected>{text}</option> }
                        }).collect_view()
                    }}
                </select>
            </div>
            {registry::gpu_choice(page, registry_gpu)}
            {figures}
            <details class="load-profile">
                <summary>"Load a profile from the collector"</summary>
                <div class="field">
                    <label for="profile-file">{format!("Profile JSON file (up to {} MiB)", intake::MAX_PROFILE_BYTES >> 20)}</label>
                    <input id="profile-file" data-testid="profile-file" type="file" accept=".json,application/json" on:change=on_file/>
                </div>
                <div class="field">
                    <label for="profile-paste">"or paste it"</label>
                    <textarea id="profile-paste" data-testid="profile-paste" rows="3"
                        placeholder="{\"runtime\": {\"cuda_context_bytes\": …}, \"points\": […]}"
                        node_ref=paste></textarea>
                </div>
                <button type="button" data-testid="profile-load" on:click=move |_| load(paste.get_untracked().map(|a| a.value()).unwrap_or_default())>"Load profile"</button>
            </details>
            <p class="status" role="status" data-testid="profile-status">
                {move || match status.get() {
                    Some(Ok(m)) => view! { <span class="ok">{m}</span> }.into_any(),
                    Some(Err(e)) => view! { <span class="error">{said(e)}</span> }.into_any(),
                    None => ().into_any(),
                }}
            </p>
        </fieldset>
    }
}
