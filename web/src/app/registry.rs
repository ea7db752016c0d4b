//! The profile registry on the page: its profiles listed in the
//! calibration panel (applying one sets the estimate's runtime, as loading
//! its file does), the GPU table's mark of the cards it has profiles for,
//! and the profile a link names fetched when the page opens.
//!
//! The registry is this page's origin (a page the registry serves), or the
//! address a link gives (`registry=URL`). Its answers are read as untrusted
//! text (`crate::registry`): bounded in size and time, shown as text.

use super::context::{use_page, PageContext};
use crate::calib;
use crate::format;
use crate::intake;
use crate::registry::{self, FetchError, Listing};
use leptos::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// Longest wait for an answer of the registry, milliseconds.
const TIMEOUT_MS: u32 = 10_000;

/// Most characters of a profile's name shown.
const NAME_CHARS: usize = 80;

/// What the page knows of the registry's profiles.
#[derive(Clone, Debug, PartialEq)]
enum Known {
    /// Asked, no answer yet.
    Pending,
    /// This page's origin serves no registry, and the link names none.
    NotServed,
    /// The registry the link names could not be listed, and why.
    Failed(String),
    /// Its profiles.
    Listed(Listing),
}

/// The registry's signals, provided by [`start`].
#[derive(Clone, Copy)]
struct RegistryContext {
    /// Its address (empty: this page's origin).
    base: StoredValue<String>,
    known: RwSignal<Known>,
    /// The catalog cards it has profiles for, with how many.
    cards: Memo<Vec<(&'static str, usize)>>,
    /// What applying a profile from the list came to.
    status: RwSignal<Option<Result<String, String>>>,
}

/// Asks the registry for its profiles and, where the link names one of
/// them, applies it (or notes why not and keeps the built-in profile).
pub fn start(page: PageContext) {
    let named = page.state.with_untracked(|s| s.registry.clone());
    let explicit = named.is_some();
    let base = named.unwrap_or_default();
    let known = RwSignal::new(Known::Pending);
    let cards = Memo::new(move |_| {
        known.with(|k| match k {
            Known::Listed(l) => l.cards().into_iter().map(|(g, n)| (g.id, n)).collect(),
            _ => Vec::new(),
        })
    });
    provide_context(RegistryContext {
        base: StoredValue::new(base.clone()),
        known,
        cards,
        status: RwSignal::new(None),
    });
    let listing_url = registry::listing_url(&base);
    let label = registry::label(&base);
    leptos::task::spawn_local(async move {
        let read = fetch_text(&listing_url, registry::MAX_LISTING_BYTES)
            .await
            .map_err(|e| e.describe())
            .and_then(|text| registry::parse_listing(&text));
        known.try_set(match read {
            Ok(listing) => Known::Listed(listing),
            // A page served without a registry: nothing to show.
            Err(_) if !explicit => Known::NotServed,
            Err(why) => Known::Failed(format!(
                "The profiles of {label} could not be listed: {why}."
            )),
        });
    });
    let linked = page
        .state
        .with_untracked(|s| registry::profile_number(&s.profile));
    if let Some(number) = linked {
        leptos::task::spawn_local(async move {
            if let Err(why) = apply(page, &base, number).await {
                page.notes
                    .try_update(|n| n.push(registry::fallback_note(number, &base, &why)));
                let id = registry::profile_id(number);
                page.state.try_update(|s| {
                    if s.profile == id {
                        s.profile = calib::BUILTIN_ID.into();
                    }
                });
            }
        });
    }
}

/// Fetches the registry's profile `number` and makes it the page's profile;
/// `Ok` says what was applied, `Err` why nothing was.
async fn apply(page: PageContext, base: &str, number: u64) -> Result<String, String> {
    let max = intake::MAX_PROFILE_BYTES;
    let text = fetch_text(&registry::profile_url(base, number), max)
        .await
        .map_err(|e| e.describe())?;
    let what = format!("profile #{number}");
    intake::check_json_text(&what, &text, max)?;
    let id = registry::profile_id(number);
    let mut profile = calib::parse_profile(&text, &id)
        .map_err(|e| format!("{what} could not be read: {}", format::shown(&e, 300)))?;
    profile.name = format!(
        "Registry #{number}: {}",
        format::shown(&profile.name, NAME_CHARS)
    );
    let applied = format!(
        "Applied “{}”: {} measured points.",
        profile.name,
        profile.points.len()
    );
    page.profiles.try_update(|ps| {
        ps.retain(|p| p.id != id);
        ps.push(profile);
    });
    page.state.try_update(|s| s.profile = id);
    Ok(applied)
}

/// The browser's words for a failed request.
fn js_reason(e: JsValue) -> FetchError {
    let why = e
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_else(|| "no answer".into());
    FetchError::Unreachable(why)
}

/// The text of a GET of `url`: no cookies sent, at most [`TIMEOUT_MS`],
/// at most `max` bytes read.
async fn fetch_text(url: &str, max: u64) -> Result<String, FetchError> {
    let init = web_sys::RequestInit::new();
    init.set_mode(web_sys::RequestMode::Cors);
    init.set_credentials(web_sys::RequestCredentials::Omit);
    init.set_signal(Some(&web_sys::AbortSignal::timeout_with_u32(TIMEOUT_MS)));
    let response: web_sys::Response = JsFuture::from(window().fetch_with_str_and_init(url, &init))
        .await
        .map_err(js_reason)?
        .unchecked_into();
    if !response.ok() {
        return Err(FetchError::Status(response.status()));
    }
    let declared = response
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(FetchError::TooLarge(max));
    }
    let mut bytes = Vec::new();
    if let Some(body) = response.body() {
        let reader: web_sys::ReadableStreamDefaultReader = body.get_reader().unchecked_into();
        loop {
            let chunk = JsFuture::from(reader.read()).await.map_err(js_reason)?;
            let field = |name: &str| js_sys::Reflect::get(&chunk, &JsValue::from_str(name));
            if field("done").ok().and_then(|d| d.as_bool()) != Some(false) {
                break;
            }
            let part: js_sys::Uint8Array = field("value").map_err(js_reason)?.unchecked_into();
            if bytes.len() as u64 + u64::from(part.length()) > max {
                let _ = reader.cancel();
                return Err(FetchError::TooLarge(max));
            }
            bytes.extend(part.to_vec());
        }
    }
    String::from_utf8(bytes).map_err(|_| FetchError::NotText)
}

/// The calibration panel's list of the registry's profiles, for the GPU
/// chosen above it, each with its facts and a button that applies it.
#[component]
pub fn RegistryProfiles() -> impl IntoView {
    let page = use_page();
    let Some(reg) = use_context::<RegistryContext>() else {
        return ().into_any();
    };
    let card = RwSignal::new(String::new());
    let apply_one = move |number: u64| {
        reg.status
            .set(Some(Ok(format!("Fetching profile #{number}…"))));
        leptos::task::spawn_local(async move {
            let done = apply(page, &reg.base.get_value(), number).await;
            reg.status.try_set(Some(
                done.map_err(|why| format!("Profile #{number} was not applied: {why}.")),
            ));
        });
    };
    let listed = move |listing: Listing| {
        let heading = format!(
            "Profiles in {} ({})",
            registry::label(&reg.base.get_value()),
            format::int(listing.entries.len() as u64)
        );
        let skipped = (listing.skipped > 0).then(|| {
            format!(
                "{} entries of the listing are not profiles and are left out.",
                format::int(listing.skipped as u64)
            )
        });
        let options = listing
            .cards()
            .into_iter()
            .map(|(g, n)| view! { <option value=g.id>{format!("{} ({n})", g.name)}</option> })
            .collect_view();
        let rows = move || {
            let chosen = card.get();
            let rows: Vec<_> = listing
                .for_card(&chosen)
                .map(|e| {
                    let number = e.number;
                    view! {
                        <li data-testid=format!("registry-profile-{number}")>
                            <span class="name">{format::shown(&e.name, NAME_CHARS)}</span>
                            <span class="facts">{e.facts()}</span>
                            <button type="button" data-testid=format!("registry-apply-{number}") on:click=move |_| apply_one(number)>"Apply"</button>
                        </li>
                    }
                })
                .collect();
            if rows.is_empty() {
                view! { <li>"No profile here yet: calibration-collector upload --to this registry adds one."</li> }.into_any()
            } else {
                rows.collect_view().into_any()
            }
        };
        view! {
            <details class="registry" data-testid="registry" open>
                <summary>{heading}</summary>
                <div class="field">
                    <label for="registry-gpu">"GPU"</label>
                    <select id="registry-gpu" data-testid="registry-gpu" on:change=move |ev| card.set(event_target_value(&ev))>
                        <option value="">"every GPU"</option>
                        {options}
                    </select>
                </div>
                <ul class="registry-list" data-testid="registry-profiles">{rows}</ul>
                <p class="hint">{skipped}" Applying a profile sets the runtime figures to its own, as loading its file does; the link then names it."</p>
            </details>
        }
        .into_any()
    };
    view! {
        {move || match reg.known.get() {
            Known::Pending | Known::NotServed => ().into_any(),
            Known::Failed(why) => view! { <p class="status error">{why}</p> }.into_any(),
            Known::Listed(listing) => listed(listing),
        }}
        <p class="status" role="status" data-testid="registry-status">
            {move || match reg.status.get() {
                Some(Ok(m)) => view! { <span class="ok">{m}</span> }.into_any(),
                Some(Err(e)) => view! { <span class="error">{e}</span> }.into_any(),
                None => ().into_any(),
            }}
        </p>
    }
    .into_any()
}

/// The GPU table's mark of a card the registry has measured profiles for.
pub fn card_mark(gpu_id: &'static str) -> impl IntoView {
    let reg = use_context::<RegistryContext>();
    move || {
        let count = reg?
            .cards
            .with(|c| c.iter().find(|(id, _)| *id == gpu_id).map(|(_, n)| *n))?;
        Some(view! {
            <span class="registry-mark" data-testid=format!("fit-{gpu_id}-registry")
                title=format!("{} measured profile(s) of this card in the registry", format::int(count as u64))>
                "measured"
            </span>
        })
    }
}
