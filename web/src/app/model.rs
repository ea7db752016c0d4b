//! The model panel: preset picker, the architecture's fields, and a
//! Hugging Face config.json import.

use super::context::{state_memo, use_page};
use super::fields::{read_file_text, said};
use super::perf;
use crate::format;
use crate::import::{self, read_model_json};
use crate::intake;
use crate::query;
use headroom_core::presets;
use leptos::prelude::*;

/// The model: a preset (searchable), its summary, its fields, an import.
#[component]
pub fn ModelPanel() -> impl IntoView {
    let page = use_page();
    let search = RwSignal::new(String::new());
    let all = StoredValue::new(presets::all());
    let current_id = state_memo(page, |s| s.model.id.clone());
    let groups = move || {
        let needle = search.get().to_ascii_lowercase();
        let mut groups: Vec<(&'static str, Vec<(&'static str, &'static str)>)> = Vec::new();
        all.with_value(|presets| {
            for p in presets {
                let hit = needle.is_empty() || preset_hit(p, &needle);
                if !hit && p.id != current_id.get() {
                    continue;
                }
                match groups.iter_mut().find(|g| g.0 == p.group) {
                    Some(g) => g.1.push((p.id, p.name)),
                    None => groups.push((p.group, vec![(p.id, p.name)])),
                }
            }
        });
        groups
    };
    let pick = move |ev| select_preset(page, &event_target_value(&ev));
    // What the search found, in words; a Hub id of a preset selects it.
    let note = RwSignal::new(None::<String>);
    let on_search = move |ev| {
        let text = event_target_value(&ev);
        search.set(text.clone());
        let found = all.with_value(|p| search_note(&text, p));
        searched(page, note, found);
    };
    let summary = move || {
        page.state.with(|s| {
            format!(
                "{} · {} parameters · {}",
                format::shown(&s.model.name, NAME_CHARS),
                format::params(s.model.arch.params()),
                s.model.arch.family()
            )
        })
    };
    view! {
        <fieldset class="group">
            <legend>"Model"</legend>
            <div class="field">
                <label for="preset-search">"Search models"</label>
                <input id="preset-search" data-testid="preset-search" type="search" placeholder="llama, esm, resnet or a Hub id (Qwen/Qwen2.5-7B)…"
                    prop:value=move || search.get()
                    on:input=on_search/>
                <p class="hint" data-testid="preset-search-note" aria-live="polite">{move || note.get()}</p>
                <button type="button" data-testid="hub-fetch" on:click=move |_| fetch_from_hub(page, note, search.get_untracked())>
                    "Fetch a Hub id's config.json"
                </button>
            </div>
            <div class="field">
                <label for="preset">"Model"</label>
                <select id="preset" data-testid="preset" on:change=pick>
                    {move || {
                        let current = current_id.get();
                        let custom = (current == "custom").then(|| {
                            let name = page.state.with_untracked(|s| s.model.name.clone());
                            view! { <option value="custom" selected=true>{format!("Custom: {}", format::shown(&name, NAME_CHARS))}</option> }
                        });
                        view! {
                            {custom}
                            {groups()
                                .into_iter()
                                .map(|(group, items)| {
                                    view! {
                                        <optgroup label=group>
                                            {items
                                                .into_iter()
                                                .map(|(id, name)| {
                                                    let selected = id == current;
                                                    view! { <option value=id selected=selected>{name}</option> }
                                                })
                                                .collect_view()}
                                        </optgroup>
                                    }
                                })
                                .collect_view()}
                        }
                    }}
                </select>
            </div>
            <p class="summary" data-testid="model-summary">{summary}</p>
            <CustomFields/>
            <HfImport/>
        </fieldset>
    }
}

/// The model search's text changed: says what it found and selects the
/// preset a Hub id names.
fn searched(page: super::context::PageContext, note: RwSignal<Option<String>>, found: Searched) {
    if let Some(id) = found.preset {
        select_preset(page, id);
    }
    note.set(found.note);
}

/// Fetches the config.json of the Hub id typed in the search box from the
/// Hugging Face Hub and imports it, saying how it went in `note`.
fn fetch_from_hub(page: super::context::PageContext, note: RwSignal<Option<String>>, text: String) {
    let hub_id = text.trim().to_string();
    if !presets::is_hub_id(&hub_id) {
        note.set(Some(
            "Type a Hugging Face Hub id (organisation/name) in Search models first.".into(),
        ));
        return;
    }
    note.set(Some("Fetching it from the Hugging Face Hub…".into()));
    leptos::task::spawn_local(async move {
        let url = hub_config_url(&hub_id);
        let outcome = match crate::registry::panel::fetch_text(&url, intake::MAX_CONFIG_BYTES).await {
            Ok(text) => import_config(page, text, Some(hub_id.clone())).await,
            Err(e) => Err(format!(
                "The Hugging Face Hub did not give {hub_id}'s config.json: {}. For a gated model, paste its config.json below.",
                e.describe()
            )),
        };
        let said = outcome.map_or_else(
            |why| why,
            |()| format!("Imported {hub_id}'s config.json from the Hugging Face Hub."),
        );
        note.set(Some(said));
    });
}

/// Makes the preset `id` the page's model (an unknown id changes nothing).
fn select_preset(page: super::context::PageContext, id: &str) {
    if let Ok(p) = presets::find(id) {
        page.update(|s| s.set_model(p.model()));
    }
}

/// What the model search found.
#[derive(Debug, Default, PartialEq)]
pub struct Searched {
    /// What to say under the search box.
    pub note: Option<String>,
    /// The preset a Hub id names, to select.
    pub preset: Option<&'static str>,
}

/// Whether a preset's name, id or group holds `needle` (lower case).
#[inline(never)]
fn preset_hit(p: &presets::Preset, needle: &str) -> bool {
    p.name.to_ascii_lowercase().contains(needle)
        || p.id.contains(needle)
        || p.group.to_ascii_lowercase().contains(needle)
}

/// What typing `text` in the model search means, given the presets.
pub fn search_note(text: &str, presets: &[presets::Preset]) -> Searched {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Searched::default();
    }
    let shown = format::shown(trimmed, NAME_CHARS);
    if let Some(p) = presets::find_by_hub_id_in(trimmed, presets) {
        return Searched {
            note: Some(format!(
                "{shown} has the shapes of the preset {}: selected.",
                p.name
            )),
            preset: Some(p.id),
        };
    }
    if presets::is_hub_id(trimmed) {
        return Searched {
            note: Some(format!(
                "No preset is {shown}: fetch its config.json from the Hugging Face Hub."
            )),
            preset: None,
        };
    }
    let needle = trimmed.to_ascii_lowercase();
    let any = presets.iter().any(|p| preset_hit(p, &needle));
    Searched {
        note: (!any).then(|| format!("No preset matches \"{shown}\": the current model stays.")),
        preset: None,
    }
}

/// Where the Hugging Face Hub serves a model's config.json.
pub fn hub_config_url(hub_id: &str) -> String {
    format!("https://huggingface.co/{hub_id}/resolve/main/config.json")
}

/// Imports a config.json's text as the page's model (named by `hub_id`
/// when fetched, else by its `_name_or_path`), or says why not. The
/// importer is in the page's second module, fetched the first time.
async fn import_config(
    page: super::context::PageContext,
    source: String,
    hub_id: Option<String>,
) -> Result<(), String> {
    let json = super::lazy::panels()
        .await?
        .import_config(&source, hub_id.as_deref())?;
    let value = serde_json::from_str(&json).map_err(|e| e.to_string())?;
    let model = read_model_json(Some(&value)).map_err(|e| import::message(&e))?;
    page.update(|s| s.set_model(model));
    Ok(())
}

/// Most characters of a model's name shown (a link or a config.json
/// names it).
pub const NAME_CHARS: usize = 80;

/// Options of the architecture's text-valued fields.
fn enum_options(key: &str) -> Option<&'static [&'static str]> {
    match key {
        "mlp" => Some(&["gated", "plain"]),
        "norm" => Some(&["rms_norm", "layer_norm", "gemma_rms_norm"]),
        "kind" | "stem.kind" => Some(&["bert", "esm"]),
        "topology" => Some(&["res_net", "mobile_net_v2"]),
        _ => None,
    }
}

/// Every field of the architecture; a change makes a custom model.
#[component]
fn CustomFields() -> impl IntoView {
    let page = use_page();
    let error = RwSignal::new(None::<String>);
    let leaves = Memo::new(move |_| {
        let arch = page
            .state
            .with(|s| serde_json::to_value(&s.model.arch).unwrap_or_default());
        let mut out = Vec::new();
        query::flatten("", &arch, &mut out);
        out
    });
    let set_leaf = move |key: String, text: String| {
        let mut leaves_now = leaves.get_untracked();
        if let Some(l) = leaves_now.iter_mut().find(|l| l.0 == key) {
            l.1 = text;
        }
        let mut value = query::unflatten(leaves_now.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let name = page.state.with_untracked(|s| {
            if s.model.id == "custom" {
                s.model.name.clone()
            } else {
                format!("{} (edited)", s.model.name)
            }
        });
        query::set_path(&mut value, "name", serde_json::Value::String(name));
        match read_model_json(Some(&value)) {
            Ok(model) => {
                error.set(None);
                page.update(|s| s.set_model(model));
            }
            Err(e) => error.set(Some(import::message(&e))),
        }
    };
    view! {
        <details class="custom" data-testid="custom-fields">
            <summary>"Edit the architecture"</summary>
            <p class="hint">"Shapes of the selected model; a change makes it a custom model. Values are checked by the core."</p>
            <span class="error" role="alert" data-testid="custom-error">{move || error.get().map(said)}</span>
            <div class="grid">
                {move || {
                    leaves
                        .get()
                        .into_iter()
                        .filter(|(k, _)| k != "family")
                        .map(|(key, value)| {
                            let id = format!("arch-{}", key.replace('.', "-"));
                            let bad = error.with(|e| e.as_ref().is_some_and(|e| e.contains(&format!("`model.{key}`"))));
                            let k2 = key.clone();
                            let input = if value == "true" || value == "false" {
                                let checked = value == "true";
                                view! {
                                    <input id=id.clone() type="checkbox" checked=checked
                                        on:change=move |ev| set_leaf(k2.clone(), event_target_checked(&ev).to_string())/>
                                }
                                .into_any()
                            } else if let Some(opts) = enum_options(&key) {
                                view! {
                                    <select id=id.clone() on:change=move |ev| set_leaf(k2.clone(), event_target_value(&ev))>
                                        {opts
                                            .iter()
                                            .map(|o| view! { <option value=*o selected=*o == value>{*o}</option> })
                                            .collect_view()}
                                    </select>
                                }
                                .into_any()
                            } else {
                                view! {
                                    <input id=id.clone() type="text" value=value.clone() aria-invalid=bad.to_string()
                                        on:change=move |ev| set_leaf(k2.clone(), event_target_value(&ev))/>
                                }
                                .into_any()
                            };
                            view! {
                                <div class="field" class:bad=bad>
                                    <label for=id>{key}</label>
                                    {input}
                                </div>
                            }
                        })
                        .collect_view()
                }}
            </div>
        </details>
    }
}

/// A Hugging Face config.json, pasted, dropped or picked, read by the core
/// once `crate::intake` has checked its size, that it is text and how deep
/// it nests.
#[component]
fn HfImport() -> impl IntoView {
    let page = use_page();
    // The text lives in the textarea alone (read when imported): a pasted
    // megabyte is not copied on every keystroke.
    let area: NodeRef<leptos::html::Textarea> = NodeRef::new();
    let error = RwSignal::new(None::<String>);
    let import = move |source: String| {
        perf::input();
        leptos::task::spawn_local(async move {
            let outcome = import_config(page, source, None).await;
            error.try_set(outcome.err());
        });
    };
    let read = move |file: web_sys::File| {
        read_file_text(
            file,
            "config.json",
            intake::MAX_CONFIG_BYTES,
            move |content| match content {
                Ok(content) => {
                    if let Some(area) = area.get_untracked() {
                        area.set_value(&content);
                    }
                    import(content);
                }
                Err(e) => error.set(Some(e)),
            },
        );
    };
    let on_drop = move |ev: web_sys::DragEvent| {
        ev.prevent_default();
        let file = ev
            .data_transfer()
            .and_then(|dt| dt.files())
            .and_then(|f| f.get(0));
        if let Some(file) = file {
            read(file);
        }
    };
    let on_file = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        if let Some(file) = input.files().and_then(|f| f.get(0)) {
            read(file);
        }
        // The same file picked again is read again.
        input.set_value("");
    };
    view! {
        <div class="field hf">
            <label for="hf-config">{format!("Or paste, drop or pick a Hugging Face config.json (up to {} MiB)", intake::MAX_CONFIG_BYTES >> 20)}</label>
            <textarea
                id="hf-config"
                data-testid="hf-config"
                rows="4"
                placeholder="{\"model_type\": \"llama\", \"hidden_size\": 4096, …}"
                node_ref=area
                on:dragover=move |ev: web_sys::DragEvent| ev.prevent_default()
                on:drop=on_drop
            ></textarea>
            <label for="hf-file" class="visually-hidden">"config.json file"</label>
            <input id="hf-file" data-testid="hf-file" type="file" accept=".json,application/json" on:change=on_file/>
            <button type="button" data-testid="hf-import" on:click=move |_| import(area.get_untracked().map(|a| a.value()).unwrap_or_default())>"Import config.json"</button>
            <span class="error" role="alert" data-testid="hf-error">{move || error.get().map(said)}</span>
        </div>
    }
}
