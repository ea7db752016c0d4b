//! The page's header: title, share link, theme, and notes about the link.

use super::context::use_page;
use super::fields::said;
use crate::calib;
use leptos::prelude::*;

/// Title, share link, theme button, and what the link could not read.
#[component]
pub fn Header() -> impl IntoView {
    let page = use_page();
    let status = RwSignal::new(String::new());
    let link = Memo::new(move |_| page.link());
    let copy = move |_| {
        let url = link.get_untracked();
        let clipboard = window().navigator().clipboard();
        let promise = clipboard.write_text(&url);
        leptos::task::spawn_local(async move {
            let ok = wasm_bindgen_futures::JsFuture::from(promise).await.is_ok();
            status.set(if ok {
                "Link copied.".into()
            } else {
                "Could not reach the clipboard: copy the link from the box.".into()
            });
        });
    };
    let loaded_note = move || {
        (page.state.with(|s| s.profile == calib::LOADED_ID)).then(|| {
            view! {
                <p class="hint" data-testid="link-profile-note">
                    "The profile you loaded from a file is not part of the link; the link opens with the built-in profile."
                </p>
            }
        })
    };
    view! {
        <header class="header">
            <div class="brand">
                <h1>"headroom"</h1>
                <p class="tagline">"Peak GPU memory of a PyTorch job, before you run it"</p>
            </div>
            <div class="share">
                <label for="share-link" class="visually-hidden">"Link to this setup"</label>
                <input id="share-link" data-testid="share-link" type="text" readonly prop:value=move || link.get()/>
                <button type="button" data-testid="copy-link" on:click=copy>"Copy link"</button>
                <button
                    type="button"
                    data-testid="theme"
                    aria-label=move || format!("Theme: {} (change)", page.theme.get().name())
                    on:click=move |_| page.theme.update(|t| *t = t.next())
                >
                    {move || format!("Theme: {}", page.theme.get().name())}
                </button>
                <span class="status" role="status" data-testid="copy-status">{move || status.get()}</span>
            </div>
            {loaded_note}
            {move || {
                let notes = page.notes.get();
                (!notes.is_empty()).then(|| view! {
                    <div class="note" role="alert" data-testid="url-note">
                        <strong>"Parts of the link could not be read and use defaults:"</strong>
                        <ul>{notes.into_iter().map(|n| view! { <li>{said(n)}</li> }).collect_view()}</ul>
                        <button type="button" data-testid="dismiss-note" on:click=move |_| page.notes.set(Vec::new())>"Dismiss"</button>
                    </div>
                })
            }}
        </header>
    }
}
