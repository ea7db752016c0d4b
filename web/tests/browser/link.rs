//! Share links: restoring the state, and bad, hostile, enormous or repeated parts of a link.

use crate::{assert_sane_figures, injected, settle, sleep, wait_until, window, Page};
use headroom_web::app::perf;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::HtmlInputElement;

#[wasm_bindgen_test]
async fn a_share_link_restores_the_state() {
    let page = Page::open("model=gpt2&batch=3&seq_len=777&x=lin&margin=20&gpus=h200,").await;
    assert_eq!(page.value("preset"), "gpt2");
    assert_eq!(page.value("batch"), "3");
    assert_eq!(page.value("seq-len"), "777");
    assert_eq!(page.value("margin"), "20");
    assert!(!page
        .get("log-x")
        .dyn_into::<HtmlInputElement>()
        .unwrap()
        .checked());
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    let link = page.value("share-link");
    for part in [
        "model=gpt2",
        "batch=3",
        "seq_len=777",
        "x=lin",
        "margin=20",
        "gpus=h200,",
    ] {
        assert!(link.contains(part), "{link} lacks {part}");
    }
    // The address bar follows the state.
    page.type_in("batch", "5");
    sleep(400).await;
    let search = window().location().search().unwrap();
    assert!(search.contains("batch=5"), "{search}");
}

#[wasm_bindgen_test]
async fn a_bad_link_opens_with_defaults_and_a_note() {
    let page = Page::open("model=nope-7b&batch=0&seq_len=512&x=sideways").await;
    let note = page.text("url-note");
    for part in ["model=nope-7b", "batch=0", "workload.batch", "x=sideways"] {
        assert!(note.contains(part), "note `{note}` lacks {part}");
    }
    assert_eq!(page.value("preset"), "llama-3.1-8b");
    assert_eq!(page.value("batch"), "1");
    assert_eq!(page.value("seq-len"), "512", "the good part is kept");
    page.click("dismiss-note");
    settle().await;
    assert!(page.find("url-note").is_none());
}

/// A shared link with unknown, misspelt and old keys opens: each is named
/// with the closest key the page knows, the rest of the link is read, and
/// a spec's path of a workload field reads as the link's key.
#[wasm_bindgen_test]
async fn unknown_keys_in_a_link_are_named_with_the_closest_key() {
    let page = Page::open(
        "model=gpt2&workload.seqlen=4096&seqlen=2048&traning.steps=3&foo=bar&colour=red&batch=3",
    )
    .await;
    let note = page.text("url-note");
    for part in [
        "ignored unknown key `workload.seqlen` in the link; did you mean `workload.seq_len`?",
        "ignored unknown key `seqlen` in the link; did you mean `seq_len`?",
        "ignored unknown key `traning.steps` in the link; did you mean `training.steps`?",
        "ignored unknown key `foo` in the link",
        "ignored unknown key `colour` in the link: this page has no such setting",
    ] {
        assert!(note.contains(part), "note `{note}` lacks `{part}`");
    }
    assert_eq!(page.value("preset"), "gpt2");
    assert_eq!(page.value("batch"), "3");
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
    assert_sane_figures(&page);
    drop(page);

    let page = Page::open("model=gpt2&workload.seq_len=777").await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    assert_eq!(page.value("seq-len"), "777");
    assert!(page
        .value("share-link")
        .ends_with("?model=gpt2&seq_len=777"));
}

/// Keys set twice, escapes that spell no text and a lone `%`: the last of
/// a key counts (a refused last value is named, not the earlier one), the
/// unreadable parts are named, and the page opens on the rest.
#[wasm_bindgen_test]
async fn duplicated_keys_and_percent_garbage_in_a_link_are_named() {
    let page = Page::open(
        "model=gpt2&batch=4&batch=0&seq_len=%ZZ&%&x=%FF%FE&%FF%FE=1&margin=%2&margin=15",
    )
    .await;
    let note = page.text("url-note");
    for part in [
        "`batch` is set 2 times in the link; only the last, `batch=0`, is read",
        "ignored batch=0: `workload.batch`",
        "ignored seq_len=%ZZ",
        "ignored unknown key `%`",
        "ignored `x=%FF%FE`: its %-escapes are not UTF-8 text",
        "ignored `%FF%FE=1`: its %-escapes are not UTF-8 text",
        "`margin` is set 2 times in the link; only the last, `margin=15`, is read",
    ] {
        assert!(note.contains(part), "note `{note}` lacks `{part}`");
    }
    assert!(!note.contains("ignored batch=4"), "{note}");
    assert!(!note.contains('\u{fffd}'), "{note}");
    assert_eq!(page.value("preset"), "gpt2");
    assert_eq!(page.value("batch"), "1");
    assert_eq!(page.value("margin"), "15");
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
    assert_sane_figures(&page);
}

/// A 100 KB link opens at once with the defaults and says why; a long one
/// of thousands of bad parts lists a dozen notes, not thousands.
#[wasm_bindgen_test]
async fn an_enormous_link_is_refused_with_a_note() {
    let started = perf::now();
    let junk = "a".repeat(100_000);
    let page = Page::open(&format!("model=gpt2&batch=3&{junk}=1")).await;
    let took = perf::now() - started;
    let note = page.text("url-note");
    assert!(
        note.contains("100,021 characters long, over the 8,192 this page reads"),
        "{note}"
    );
    assert_eq!(page.value("preset"), "llama-3.1-8b");
    assert!(took < 5000.0, "the page took {took:.0} ms to open");
    // The address bar holds the page's own link again.
    sleep(400).await;
    let search = window().location().search().unwrap();
    assert!(search.len() < 100, "{search}");
    drop(page);

    let mut query = String::from("model=gpt2");
    let mut i = 0;
    while query.len() < 8000 {
        query.push_str(&format!("&k{i}=1"));
        i += 1;
    }
    let started = perf::now();
    let page = Page::open(&query).await;
    let took = perf::now() - started;
    let items = page
        .root
        .query_selector_all("[data-testid='url-note'] li")
        .unwrap()
        .length();
    assert!(items <= 12, "{items} notes");
    assert!(
        page.text("url-note").contains("more parts of the link"),
        "{}",
        page.text("url-note")
    );
    assert_eq!(page.value("preset"), "gpt2");
    assert!(took < 5000.0, "the page took {took:.0} ms to open");
    drop(page);

    // A key thousands of dots deep would build a value as deep (and
    // exhaust the stack reading it): refused by name.
    let page = Page::open(&format!(
        "model=custom&a.family=decoder&batch=2&a.{}y=1",
        "x.".repeat(4000)
    ))
    .await;
    let note = page.text("url-note");
    assert!(note.contains("a key of 4,002 dotted parts"), "{note}");
    assert!(note.contains("ignored the custom model"), "{note}");
    assert_eq!(page.value("preset"), "llama-3.1-8b");
    assert_eq!(page.value("batch"), "2");
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
}

/// Markup, terminal escapes and bidirectional overrides in a link are shown
/// as text: nothing is made of them, and the invisible ones are escaped.
#[wasm_bindgen_test]
async fn text_from_a_link_is_shown_as_text() {
    let page = Page::open(
        "model=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E&%3Cscript%3Ealert(2)%3C%2Fscript%3E=1&foo%1B%5B31m%E2%80%AE=1",
    )
    .await;
    let note = page.text("url-note");
    for part in [
        "ignored model=<img src=x onerror=alert(1)>",
        "ignored unknown key `<script>alert(2)</script>`",
        "ignored unknown key `foo\\u{1b}[31m\\u{202e}`",
    ] {
        assert!(note.contains(part), "note `{note}` lacks `{part}`");
    }
    assert!(!note.contains(['\u{1b}', '\u{202e}']), "{note}");
    assert_eq!(injected(&page), None);
    drop(page);

    // A custom model's name, as a link carries it.
    let p = headroom_core::presets::find("gpt2").expect("preset");
    let mut s = headroom_web::state::AppState::for_model(p.model());
    s.model.id = "custom".into();
    s.model.name = "<b>bold</b><img src=x onerror=alert(3)>\u{202e}\u{0}".into();
    let page = Page::open(&s.to_query()).await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    let summary = page.text("model-summary");
    assert!(
        summary.contains("<b>bold</b><img src=x onerror=alert(3)>\\u{202e}\\u{0}"),
        "{summary}"
    );
    let option = page.get("preset").text_content().unwrap_or_default();
    assert!(option.contains("Custom: <b>bold</b>"), "{option}");
    assert!(!option.contains(['\u{0}', '\u{202e}']), "{option}");
    let label = page.get("chart").get_attribute("aria-label").unwrap();
    assert!(!label.contains(['\u{0}', '\u{202e}']), "{label}");
    assert_eq!(injected(&page), None);
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
    assert_sane_figures(&page);
    drop(page);

    // LoRA targets from a link: the core's refusal quotes them, escaped.
    let p = headroom_core::presets::find("llama-3.2-1b").expect("preset");
    let mut s = headroom_web::state::AppState::for_model(p.model());
    s.workload.mode = headroom_core::workload::Mode::Training;
    s.workload.training.lora = Some(headroom_core::workload::Lora {
        rank: 8,
        alpha: Some(16.0),
        target_modules: vec!["<img src=x onerror=alert(4)>\u{202e}\u{1b}".into()],
        dropout: None,
    });
    let page = Page::open(&s.to_query()).await;
    wait_until("the refusal", || {
        page.root
            .text_content()
            .unwrap_or_default()
            .contains("<img src=x onerror=alert(4)>\\u{202e}\\u{1b}")
    })
    .await;
    page.fit_table().await;
    let all = page.root.text_content().unwrap_or_default();
    assert!(!all.contains(['\u{1b}', '\u{202e}']), "{all}");
    assert_eq!(injected(&page), None);
    assert_sane_figures(&page);
}
