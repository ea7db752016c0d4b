//! Browser tests: mount the page in headless Chromium and drive it.
//! `cargo test -p headroom-web --target wasm32-unknown-unknown --test browser`
//! This file holds the harness the tests share; each module the tests of
//! one area of the page.
#![cfg(target_arch = "wasm32")]

use headroom_web::app::App;
use leptos::mount::mount_to;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;
use web_sys::{Element, HtmlElement, HtmlInputElement, HtmlSelectElement, HtmlTextAreaElement};

mod advice_timeline;
mod chart;
mod gpu_table;
mod layout;
mod link;
mod model;
mod profiles;
mod words;
mod workload;

wasm_bindgen_test_configure!(run_in_browser);

fn window() -> web_sys::Window {
    web_sys::window().expect("a window")
}

async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        window()
            .set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms)
            .expect("setTimeout");
    });
    wasm_bindgen_futures::JsFuture::from(promise)
        .await
        .expect("timer");
}

/// Lets effects run and timers (fit table, URL) fire.
async fn settle() {
    for _ in 0..3 {
        leptos::task::tick().await;
    }
    sleep(120).await;
}

async fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..300 {
        if ok() {
            return;
        }
        sleep(20).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The page mounted in its own container, opened at `?query`.
struct Page {
    root: Element,
    _handle: Box<dyn std::any::Any>,
}

impl Page {
    async fn open(query: &str) -> Page {
        let path = window().location().pathname().expect("a path");
        let url = if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        };
        window()
            .history()
            .expect("history")
            .replace_state_with_url(&JsValue::NULL, "", Some(&url))
            .expect("replaceState");
        let doc = window().document().expect("a document");
        let root = doc.create_element("div").expect("a div");
        doc.body()
            .expect("a body")
            .append_child(&root)
            .expect("append");
        // The test binary holds the panels module's code: the page shows
        // the advice and timeline panels from it instead of fetching it.
        headroom_web::panels::show_panels_in_this_module();
        let handle = mount_to(root.clone().unchecked_into::<HtmlElement>(), App);
        settle().await;
        Page {
            root,
            _handle: Box::new(handle),
        }
    }

    fn find(&self, id: &str) -> Option<Element> {
        self.root
            .query_selector(&format!("[data-testid='{id}']"))
            .expect("a valid selector")
    }

    #[track_caller]
    fn get(&self, id: &str) -> Element {
        self.find(id)
            .unwrap_or_else(|| panic!("no element with data-testid={id}"))
    }

    fn text(&self, id: &str) -> String {
        self.find(id)
            .and_then(|e| e.text_content())
            .unwrap_or_default()
    }

    fn value(&self, id: &str) -> String {
        let e = self.get(id);
        if let Some(i) = e.dyn_ref::<HtmlInputElement>() {
            i.value()
        } else if let Some(s) = e.dyn_ref::<HtmlSelectElement>() {
            s.value()
        } else if let Some(t) = e.dyn_ref::<HtmlTextAreaElement>() {
            t.value()
        } else {
            panic!("{id} has no value")
        }
    }

    fn fire(&self, el: &Element, kind: &str) {
        let init = web_sys::EventInit::new();
        init.set_bubbles(true);
        let ev = web_sys::Event::new_with_event_init_dict(kind, &init).expect("an event");
        el.dispatch_event(&ev).expect("dispatch");
    }

    /// Types `value` into an input (fires `input` and `change`).
    fn type_in(&self, id: &str, value: &str) {
        let e = self.get(id);
        if let Some(i) = e.dyn_ref::<HtmlInputElement>() {
            i.set_value(value);
        } else if let Some(t) = e.dyn_ref::<HtmlTextAreaElement>() {
            t.set_value(value);
        }
        self.fire(&e, "input");
        self.fire(&e, "change");
    }

    fn choose(&self, id: &str, value: &str) {
        let e = self.get(id);
        e.dyn_ref::<HtmlSelectElement>()
            .expect("a select")
            .set_value(value);
        self.fire(&e, "change");
    }

    fn click(&self, id: &str) {
        self.get(id)
            .dyn_into::<HtmlElement>()
            .expect("an element")
            .click();
    }

    fn chart_attr(&self, name: &str) -> u32 {
        self.get("chart")
            .get_attribute(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn chart_attr_of(&self, id: &str, name: &str) -> u32 {
        self.get(id)
            .get_attribute(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Waits until the chart shows a curve for the current inputs (the
    /// first one comes after the first paint where it would delay it).
    async fn curve_drawn(&self) {
        wait_until("the curve", || {
            self.find("curve-progress").is_none()
                && self.chart_attr("data-points") > 0
                && self.get("chart").get_attribute("data-complete").as_deref() == Some("true")
        })
        .await;
    }

    fn fit_done(&self) -> bool {
        self.get("gpu-table").get_attribute("aria-busy").as_deref() == Some("false")
    }

    async fn fit_table(&self) -> String {
        wait_until("the GPU table", || {
            self.get("gpu-table").get_attribute("aria-busy").as_deref() == Some("false")
        })
        .await;
        self.text("gpu-table")
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.root.remove();
    }
}

/// Whether the page can start worker threads here (one per spare core).
/// Where it cannot, the caller's worker checks are skipped, and the log
/// says so.
fn workers_expected(what: &str) -> bool {
    let cores = window().navigator().hardware_concurrency() as usize;
    if cores < 2 {
        console_log!("skipped: {what}: {cores} core, so the page starts no worker");
    }
    cores >= 2
}

/// Text on the page that no figure may read as: `NaN`, an infinity or a
/// negative size (the first one found, with its surroundings).
fn bad_number(text: &str) -> Option<String> {
    let around = |at: usize| {
        let start = text[..at]
            .char_indices()
            .rev()
            .nth(20)
            .map_or(0, |(i, _)| i);
        text[start..].chars().take(50).collect::<String>()
    };
    let mut offset = 0;
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if matches!(word, "NaN" | "nan" | "inf" | "Infinity" | "infinity") {
            return Some(around(offset));
        }
        offset += word.len() + 1;
        offset = offset.min(text.len());
    }
    if let Some(at) = text.find('∞') {
        return Some(around(at));
    }
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for w in chars.windows(3) {
        let [(_, before), (at, minus), (_, digit)] = [w[0], w[1], w[2]];
        if matches!(minus, '-' | '−')
            && digit.is_ascii_digit()
            && (before.is_whitespace() || before == '(' || before == ':')
        {
            return Some(around(at));
        }
    }
    None
}

/// The figures the page shows (breakdown, GPU table, model, runtime,
/// curve) hold no `NaN`, infinity or negative size.
#[track_caller]
fn assert_sane_figures(page: &Page) {
    for id in [
        "breakdown",
        "gpu-table",
        "model-summary",
        "runtime-figures",
        "curve-error",
        "off-scale",
    ] {
        let text = page.text(id);
        if let Some(bad) = bad_number(&text) {
            panic!("{id} shows `{bad}`: {text}");
        }
    }
    let label = page
        .get("chart")
        .get_attribute("aria-label")
        .unwrap_or_default();
    assert!(bad_number(&label).is_none(), "{label}");
}

/// Elements that text from a link or a file could have made, had the page
/// read it as markup.
fn injected(page: &Page) -> Option<String> {
    page.root
        .query_selector("script, img, b, iframe, svg, [onerror], [onclick]")
        .expect("a valid selector")
        .map(|e| e.outer_html())
}

#[wasm_bindgen_test]
fn bad_numbers_are_found() {
    assert!(bad_number("Peak 12.00 GB at 4,096 tokens (llama-3.1-8b)").is_none());
    assert!(bad_number("inference, generate").is_none());
    assert!(bad_number("Peak NaN GB").is_some());
    assert!(bad_number("Peak inf GB").is_some());
    assert!(bad_number("Peak -1.00 GB").is_some());
    assert!(bad_number("share: -3.0%").is_some());
}

/// A file for `input` (as if picked in the file dialog), then `change`.
fn pick_file(page: &Page, id: &str, parts: &js_sys::Array, name: &str) {
    let file = web_sys::File::new_with_blob_sequence(parts, name).expect("a file");
    let dt = web_sys::DataTransfer::new().expect("a DataTransfer");
    dt.items().add_with_file(&file).expect("add the file");
    let input = page.get(id);
    input
        .dyn_ref::<HtmlInputElement>()
        .expect("a file input")
        .set_files(dt.files().as_ref());
    page.fire(&input, "change");
}

// The profile registry. scripts/test.sh starts a headroom-registry on an
// empty database and builds these tests with its address in
// HEADROOM_REGISTRY_URL; it fails unless the registry test (profiles.rs)
// logs its REGISTRY line.

const REGISTRY_URL: Option<&str> = option_env!("HEADROOM_REGISTRY_URL");

/// Uploads `profile` through the registry's API; its number there.
async fn upload_profile(base: &str, profile: &str) -> u64 {
    let init = web_sys::RequestInit::new();
    init.set_method("POST");
    init.set_body(&JsValue::from_str(profile));
    let headers = web_sys::Headers::new().expect("headers");
    headers
        .append("Content-Type", "application/json")
        .expect("a header");
    init.set_headers(&headers);
    let url = format!("{base}/api/v1/profiles");
    let answer =
        wasm_bindgen_futures::JsFuture::from(window().fetch_with_str_and_init(&url, &init))
            .await
            .unwrap_or_else(|e| panic!("no answer from {url}: {e:?}"));
    let answer: web_sys::Response = answer.unchecked_into();
    let text = wasm_bindgen_futures::JsFuture::from(answer.text().expect("a body"))
        .await
        .expect("the body")
        .as_string()
        .unwrap_or_default();
    // 201: stored; 200: the same profile stored already (its id).
    assert!(
        matches!(answer.status(), 200 | 201),
        "{}: {text}",
        answer.status()
    );
    let stored: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    stored["id"].as_u64().expect("the stored profile's id")
}

/// Waits for the breakdown of the estimate, then gives its total.
async fn peak_total(page: &Page) -> String {
    wait_until("the breakdown", || {
        page.find("row-cuda_context").is_some() && !page.text("peak-total").is_empty()
    })
    .await;
    page.text("peak-total")
}
