//! The profile registry on the page: its profiles listed in the
//! calibration panel (applying one sets the estimate's runtime, as loading
//! its file does), the GPU table's mark of the cards it has profiles for,
//! and the profile a link names fetched when the page opens.
//!
//! The registry is this page's origin (a page the registry serves), or the
//! address a link gives (`registry=URL`). Its answers are read as untrusted
//! text (`crate::registry`): bounded in size and time, shown as text.

use crate::app::context::PageContext;
use crate::app::fields::select_field;
use crate::calib;
use crate::format;
use crate::intake;
use crate::registry::{self, FetchError};
use leptos::prelude::*;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// Longest wait for an answer of the registry, milliseconds.
const TIMEOUT_MS: u32 = 10_000;

/// Most characters of a profile's name shown.
const NAME_CHARS: usize = 80;

/// The registry's address (empty: this page's origin).
fn base_of(page: PageContext) -> String {
    page.state
        .with_untracked(|s| s.registry.clone())
        .unwrap_or_default()
}

/// Asks the registry for its profiles (into `page.registry`), then applies
/// the one the link names.
/// What fails where the link named a registry or a profile is a note, and
/// the page keeps the built-in profile; a page served without a registry
/// shows nothing of it.
pub fn start(page: PageContext) {
    let base = base_of(page);
    let explicit = !base.is_empty();
    let linked = page
        .state
        .with_untracked(|s| registry::profile_number(&s.profile));
    leptos::task::spawn_local(async move {
        let read = fetch_text(&registry::listing_url(&base), registry::MAX_LISTING_BYTES)
            .await
            .map_err(|e| e.describe())
            .and_then(|text| registry::parse_listing(&text));
        let failed = match read {
            Ok(found) => {
                if found.skipped > 0 {
                    let note = registry::skipped_note(&base, found.skipped);
                    page.notes.try_update(|n| n.push(note));
                }
                page.registry.try_set(Some(found));
                match linked {
                    Some(number) => apply(page, &base, number).await.err(),
                    None => None,
                }
            }
            Err(why) => (explicit || linked.is_some()).then_some(why),
        };
        let Some(why) = failed else { return };
        let note = match linked {
            Some(number) => registry::fallback_note(number, &base, &why),
            None => registry::unlisted_note(&base, &why),
        };
        page.notes.try_update(|n| n.push(note));
        page.state.try_update(|s| {
            if registry::profile_number(&s.profile).is_some() {
                s.profile = calib::BUILTIN_ID.into();
            }
        });
    });
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
pub(crate) async fn fetch_text(url: &str, max: u64) -> Result<String, FetchError> {
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

/// The registry's profiles measured on the card `gpu_id` (every profile
/// for an empty id) that are not the page's yet, as the profile select's
/// options: their id, and their name with their facts.
pub fn profile_options(page: PageContext, gpu_id: &str) -> Vec<(String, String)> {
    page.registry.with(|listing| {
        let Some(listing) = listing else {
            return Vec::new();
        };
        page.profiles.with(|loaded| {
            listing
                .for_card(gpu_id)
                .filter(|e| {
                    // Not offered twice: a profile the page holds, or the
                    // registry's copy of a file the page bundles.
                    let id = registry::profile_id(e.number);
                    !loaded.iter().any(|p| {
                        p.id == id || (p.name == e.name && e.points == Some(p.points.len() as u64))
                    })
                })
                .map(|e| {
                    let name = format::shown(&e.name, NAME_CHARS);
                    let text = format!("Registry #{}: {name} — {}", e.number, e.facts());
                    (registry::profile_id(e.number), text)
                })
                .collect()
        })
    })
}

/// Makes `id` the page's profile: a registry profile the page does not
/// hold yet is fetched first, and `status` (the panel's status line) says
/// what that came to.
pub fn choose(page: PageContext, status: RwSignal<Option<Result<String, String>>>, id: String) {
    let held = page
        .profiles
        .with_untracked(|ps| ps.iter().any(|p| p.id == id));
    let Some(number) = registry::profile_number(&id).filter(|_| !held) else {
        page.update(|s| s.profile = id);
        return;
    };
    crate::app::perf::input();
    status.set(Some(Ok(format!("Fetching profile #{number}…"))));
    leptos::task::spawn_local(async move {
        let done = apply(page, &base_of(page), number).await;
        status.try_set(Some(
            done.map_err(|why| format!("Profile #{number} was not applied: {why}.")),
        ));
    });
}

/// The choice of GPU whose registry profiles the profile select lists
/// (shown once the registry has listed its profiles).
pub fn gpu_choice(page: PageContext, gpu_id: RwSignal<String>) -> impl IntoView {
    move || {
        page.registry.with(|listing| {
            let listing = listing.as_ref()?;
            let mut options = vec![("", "every GPU")];
            options.extend(listing.cards().into_iter().map(|(g, _)| (g.id, g.name)));
            Some(select_field(
                "registry-gpu",
                "Registry profiles measured on",
                options,
                move || gpu_id.get(),
                move |v| gpu_id.set(v),
            ))
        })
    }
}

/// The GPU table's mark of a card: "measured" where the estimates use a
/// profile measured on it (the applied profile's card), "profile in the
/// registry" where the registry holds one that is not applied.
pub fn card_mark(page: PageContext, gpu_id: &'static str) -> impl IntoView {
    move || {
        let runtime = page.runtime.get();
        let applied = runtime
            .gpu
            .as_deref()
            .and_then(|name| registry::card_for(name, runtime.gpu_total_bytes.unwrap_or(0)));
        let (text, title) = if applied.is_some_and(|c| c.id == gpu_id) {
            (
                "measured",
                "The estimates use a calibration profile measured on this card",
            )
        } else if page.registry.with(|l| {
            l.as_ref()
                .is_some_and(|l| l.for_card(gpu_id).next().is_some())
        }) {
            ("profile in the registry", "The profile registry holds a profile measured on this card: choose it under Calibration profile")
        } else {
            return None;
        };
        Some(view! {
            <span class="registry-mark" data-testid=format!("fit-{gpu_id}-registry") title=title>{text}</span>
        })
    }
}
