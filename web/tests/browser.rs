//! Browser tests: mount the page in headless Chromium and drive it.
//! `cargo test -p headroom-web --target wasm32-unknown-unknown`
#![cfg(target_arch = "wasm32")]

use headroom_web::app::perf::Milestone;
use headroom_web::app::{last_export, perf, App};
use leptos::mount::mount_to;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;
use web_sys::{Element, HtmlElement, HtmlInputElement, HtmlSelectElement, HtmlTextAreaElement};

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

#[wasm_bindgen_test]
async fn picking_a_model_and_changing_the_length_updates_breakdown_and_gpu_table() {
    let page = Page::open("").await;
    page.choose("preset", "llama-3.2-1b");
    settle().await;
    assert!(
        page.text("model-summary").contains("Llama 3.2 1B"),
        "{}",
        page.text("model-summary")
    );
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
    let peak_before = page.text("peak-total");
    let table_before = page.fit_table().await;
    assert!(table_before.contains("NVIDIA H200"), "{table_before}");

    page.type_in("seq-len", "32768");
    settle().await;
    assert_eq!(page.value("seq-len"), "32768");
    let peak_after = page.text("peak-total");
    assert_ne!(peak_before, peak_after, "the peak follows the length");
    assert!(page.text("breakdown").contains("32,768"));
    let table_after = page.fit_table().await;
    assert_ne!(
        table_before, table_after,
        "the GPU table follows the length"
    );

    // A bad value names the field and its range, and changes nothing.
    page.type_in("batch", "0");
    settle().await;
    assert!(
        page.text("batch-error").contains("1 to 65536"),
        "{}",
        page.text("batch-error")
    );
    assert_eq!(page.text("peak-total"), peak_after);
}

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

#[wasm_bindgen_test]
async fn importing_a_profile_applies_its_runtime_and_overlays_its_points() {
    let page = Page::open("model=llama-3.1-8b&seq_len=2048").await;
    // A busy machine computes the first curve after the first paint.
    page.curve_drawn().await;
    let measured_before = page.chart_attr("data-measured");
    assert!(
        measured_before >= 1,
        "bundled H200 points match the default llama workload"
    );

    page.type_in("profile-paste", "{\"runtime\": 3}");
    page.click("profile-load");
    settle().await;
    assert!(
        page.text("profile-status").contains("runtime"),
        "{}",
        page.text("profile-status")
    );

    let profile = r#"{
        "name": "test card",
        "runtime": {"gpu": "Test GPU", "cuda_context_bytes": 1000000000, "allocator": "default"},
        "points": [
            {"case": "a", "model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 1, "seq_len": 1000, "dtype": "bf16"}, "measured": {"driver_peak": 20000000000}},
            {"case": "b", "model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 1, "seq_len": 3000, "dtype": "bf16"}, "measured": {"driver_peak": 21000000000}},
            {"case": "c", "model": "gpt2", "workload": {"mode": "inference", "seq_len": 3000}, "measured": {"driver_peak": 1000000000}}
        ]
    }"#;
    page.type_in("profile-paste", profile);
    page.click("profile-load");
    settle().await;
    assert!(
        page.text("profile-status").contains("Loaded"),
        "{}",
        page.text("profile-status")
    );
    assert_eq!(page.value("profile"), "loaded");
    assert!(
        page.text("runtime-figures").contains("954 MiB"),
        "{}",
        page.text("runtime-figures")
    );
    assert!(page.text("runtime-figures").contains("Test GPU"));
    // The loaded profile's CUDA context is the breakdown's first row.
    wait_until("the breakdown", || page.find("row-cuda_context").is_some()).await;
    assert!(
        page.text("row-cuda_context").contains("1.00 GB"),
        "{}",
        page.text("row-cuda_context")
    );
    // The chart is redrawn once the curve for the loaded runtime is in
    // (the GPU table's estimates may run before it on a busy machine).
    wait_until("the two matching points drawn", || {
        page.chart_attr("data-measured") == 2
    })
    .await;
    assert_eq!(page.chart_attr("data-measured"), 2);
    assert!(page.find("link-profile-note").is_some());
}

#[wasm_bindgen_test]
async fn csv_export_holds_the_curve() {
    let page = Page::open("model=gpt2&x=lin&from=128&to=1024").await;
    page.click("export-csv");
    let (name, csv) = last_export().expect("an export");
    assert_eq!(name, "headroom-gpt2-curve.csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert!(
        lines[0].starts_with("seq_len,driver_peak_bytes,reserved_peak_bytes,allocated_peak_bytes,"),
        "{}",
        lines[0]
    );
    let points = page.chart_attr("data-points") as usize;
    assert!(points > 0, "no curve to export");
    assert_eq!(lines.len(), 1 + points);
    assert!(lines[1].starts_with("128,"), "{}", lines[1]);
    assert!(lines.last().unwrap().starts_with("1024,"));
    page.click("export-json");
    let (name, json) = last_export().expect("an export");
    assert_eq!(name, "headroom-gpt2-estimate.json");
    assert!(json.contains("\"model\": \"gpt2\""), "{json}");
}

#[wasm_bindgen_test]
async fn a_bad_config_json_names_the_key() {
    let page = Page::open("").await;
    page.type_in("hf-config", "{\"hidden_size\": 8}");
    page.click("hf-import");
    settle().await;
    assert!(
        page.text("hf-error").contains("model_type"),
        "{}",
        page.text("hf-error")
    );
    page.type_in("hf-config", "{\"model_type\": ");
    page.click("hf-import");
    settle().await;
    assert!(
        page.text("hf-error").contains("malformed JSON"),
        "{}",
        page.text("hf-error")
    );
    // A Hub id pasted where the file's contents go: the box says what it wants.
    page.type_in("hf-config", "Qwen/Qwen2.5-7B-Instruct");
    page.click("hf-import");
    settle().await;
    let error = page.text("hf-error");
    assert!(
        error.contains("Hub id") && error.contains("config.json") && !error.contains("malformed"),
        "{error}"
    );
}

/// `window.fetch` answering as the Hugging Face Hub would, for the length
/// of a test: one model's config.json at its Hub address, 404 for any
/// other; every requested address kept in `window.__hubRequests`. The
/// browser's own fetch comes back when this is dropped.
struct HubStandIn;

impl HubStandIn {
    fn serve(hub_id: &str, config: &str) -> HubStandIn {
        let install = js_sys::Function::new_with_args(
            "url, body",
            "window.__realFetch = window.__realFetch || window.fetch; \
             window.__hubRequests = []; \
             window.fetch = (input, init) => { \
               const asked = String(input); window.__hubRequests.push(asked); \
               return Promise.resolve(asked === url \
                 ? new Response(body, {status: 200, headers: {'content-type': 'application/json'}}) \
                 : new Response('Entry not found', {status: 404})); };",
        );
        let url = format!("https://huggingface.co/{hub_id}/resolve/main/config.json");
        install
            .call2(
                &JsValue::NULL,
                &JsValue::from_str(&url),
                &JsValue::from_str(config),
            )
            .expect("fetch replaced");
        HubStandIn
    }

    fn requests(&self) -> Vec<String> {
        let list = js_sys::Reflect::get(&window(), &JsValue::from_str("__hubRequests")).unwrap();
        js_sys::Array::from(&list)
            .iter()
            .filter_map(|v| v.as_string())
            .collect()
    }
}

impl Drop for HubStandIn {
    fn drop(&mut self) {
        let restore = js_sys::Function::new_no_args(
            "if (window.__realFetch) { window.fetch = window.__realFetch; delete window.__realFetch; }",
        );
        restore.call0(&JsValue::NULL).expect("fetch restored");
    }
}

#[wasm_bindgen_test]
async fn a_hub_id_selects_its_preset_or_fetches_its_config_json() {
    let page = Page::open("").await;
    // The Hub id of a preset selects it.
    page.type_in("preset-search", "Qwen/Qwen2.5-7B-Instruct");
    settle().await;
    assert_eq!(page.value("preset"), "qwen2.5-7b");
    let note = page.text("preset-search-note");
    assert!(
        note.contains("Qwen2.5 7B") && note.contains("selected"),
        "{note}"
    );
    // Words that name nothing say so; the model stays.
    page.type_in("preset-search", "zzqx");
    settle().await;
    assert!(
        page.text("preset-search-note")
            .contains("No preset matches"),
        "{}",
        page.text("preset-search-note")
    );
    assert_eq!(page.value("preset"), "qwen2.5-7b");
    // The fetch needs a Hub id.
    page.click("hub-fetch");
    settle().await;
    assert!(
        page.text("preset-search-note")
            .contains("Type a Hugging Face Hub id"),
        "{}",
        page.text("preset-search-note")
    );
    // A Hub id of no preset offers the fetch, from a stand-in for the Hub.
    let config = r#"{"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
        "vocab_size": 32000, "tie_word_embeddings": false}"#;
    let hub = HubStandIn::serve("acme/tiny-llama", config);
    page.type_in("preset-search", "acme/tiny-llama");
    settle().await;
    assert!(page
        .text("preset-search-note")
        .contains("No preset is acme/tiny-llama"));
    page.click("hub-fetch");
    wait_until("the fetched model", || {
        page.text("model-summary").contains("acme/tiny-llama")
    })
    .await;
    assert!(
        page.text("model-summary").contains("45.4 M parameters"),
        "{}",
        page.text("model-summary")
    );
    assert!(
        page.text("preset-search-note").contains("Imported"),
        "{}",
        page.text("preset-search-note")
    );
    // A model the Hub does not have: its answer, said, and the model kept.
    page.type_in("preset-search", "acme/missing");
    settle().await;
    page.click("hub-fetch");
    wait_until("the Hub's answer", || {
        page.text("preset-search-note").contains("404")
    })
    .await;
    assert!(page.text("model-summary").contains("acme/tiny-llama"));
    assert_eq!(
        hub.requests(),
        [
            "https://huggingface.co/acme/tiny-llama/resolve/main/config.json",
            "https://huggingface.co/acme/missing/resolve/main/config.json"
        ]
    );
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Input change to redrawn chart, 256-point curve: for 60 changes that
/// recompute the whole curve (batch), the median time to the first chart
/// for the new inputs (its first exact points) and to the complete curve;
/// for 60 that only move the chosen length (the curve is reused), the
/// median time to the redraw.
#[wasm_bindgen_test]
async fn redraw_time_after_an_input_change() {
    let page = Page::open("model=llama-3.1-8b").await;
    page.curve_drawn().await;
    assert_eq!(page.chart_attr("data-points"), 256, "a 256-point curve");
    let _ = (perf::take(), perf::take_complete(), perf::take_draw_times());
    for m in [
        Milestone::PageShareDone,
        Milestone::WorkerAnswered,
        Milestone::CurveLanded,
    ] {
        let _ = perf::take_milestones(m);
    }
    let run = |values: Vec<String>, id: &'static str| {
        let page = &page;
        async move {
            for v in values {
                let before = perf::complete_draws();
                page.type_in(id, &v);
                wait_until("a complete redraw", || perf::complete_draws() > before).await;
            }
            (perf::take(), perf::take_complete())
        }
    };
    let (first, complete) = run((0..60).map(|i| (2 + i % 8).to_string()).collect(), "batch").await;
    let draws = perf::take_draw_times();
    let moments = [
        Milestone::PageShareDone,
        Milestone::WorkerAnswered,
        Milestone::CurveLanded,
    ]
    .map(|m| {
        let times = perf::take_milestones(m);
        (
            times.len(),
            if times.is_empty() {
                f64::NAN
            } else {
                median(times)
            },
        )
    });
    let (marker, _) = run(
        (0..60).map(|i| (1024 + 64 * i).to_string()).collect(),
        "seq-len",
    )
    .await;
    let (first_n, complete_n, marker_n) = (first.len(), complete.len(), marker.len());
    let (first_ms, complete_ms, marker_ms) = (median(first), median(complete), median(marker));
    // The floor under both: the same curves' replays alone, on this thread,
    // with no drawing and no worker (the page idle).
    let preset = headroom_core::presets::find("llama-3.1-8b").expect("preset");
    let state = headroom_web::state::AppState::for_model(preset.model());
    let rt = headroom_core::RuntimeProfile::h200();
    let mut replays = Vec::new();
    for batch in 2..10 {
        let mut workload = state.workload.clone();
        workload.batch = batch;
        let start = perf::now();
        let curve =
            headroom_web::curve::CurveData::compute(&preset.arch, &workload, &rt, &state.view, 256);
        replays.push(perf::now() - start);
        assert_eq!(curve.lengths.len(), 256);
    }
    let replay_ms = median(replays);
    // What drawing the chart itself takes, over the curve-changing inputs.
    let draw_ms = median(draws);
    console_log!(
        "PERF redraw after a curve-changing input: median {first_ms:.1} ms to the first chart for the new inputs, median {complete_ms:.1} ms to the complete 256-point curve, over {first_n} changes; after a length change: median {marker_ms:.1} ms over {marker_n} changes; the 256 replays alone on one thread: median {replay_ms:.1} ms; drawing the chart: median {draw_ms:.1} ms"
    );
    let [(share_n, share_ms), (answer_n, answer_ms), (landed_n, landed_ms)] = moments;
    console_log!(
        "PERF the complete curve's way, medians after a curve-changing input: the page thread's share done at {share_ms:.1} ms ({share_n} curves), a worker's share answered at {answer_ms:.1} ms ({answer_n} answers), the curve handed to the chart at {landed_ms:.1} ms ({landed_n})"
    );
    assert!(first_n >= 50 && complete_n >= 50 && marker_n >= 50);
}

/// An input rebuilds only what depends on it: changing the batch keeps the
/// other fields (the one being typed in keeps its focus and caret) and the
/// line under the chart (the page below does not move when the scale
/// changes), so the browser re-lays out and repaints little while the
/// curve is computed.
#[wasm_bindgen_test]
async fn a_batch_change_keeps_the_other_fields_and_the_line_under_the_chart() {
    let page = Page::open("model=llama-3.1-8b").await;
    page.curve_drawn().await;
    let kept = [
        "seq-len",
        "seq-slider",
        "dtype",
        "world-size",
        "strategy",
        "off-scale",
    ];
    let before: Vec<Element> = kept.iter().map(|id| page.get(id)).collect();
    assert!(
        page.text("off-scale").starts_with("Above the chart:"),
        "batch 2's curve stays below an H200: {}",
        page.text("off-scale")
    );
    let draws = perf::complete_draws();
    page.type_in("batch", "9");
    wait_until("the complete curve for batch 9", || {
        perf::complete_draws() > draws
    })
    .await;
    settle().await;
    assert_eq!(
        page.text("off-scale"),
        "",
        "batch 9's curve reaches the H200 line"
    );
    for (id, old) in kept.iter().zip(&before) {
        assert!(
            old.is_connected() && page.get(id).is_same_node(Some(old)),
            "{id} was rebuilt by a batch change"
        );
    }
}

/// The page's worker threads start from the module the page loaded, and a
/// curve shared between them and the page's thread is the curve the page's
/// thread computes alone.
#[wasm_bindgen_test]
async fn the_curve_workers_give_the_single_thread_curve() {
    use headroom_web::curve::{view_lengths, CurveData};
    use headroom_web::workers;
    let page = Page::open("model=llama-3.2-1b").await;
    let cores = window().navigator().hardware_concurrency() as usize;
    if workers_expected("a worker became ready") {
        // Loading and compiling the module in a worker can take a while on
        // a slow machine: allow 20 s.
        for _ in 0..1000 {
            if !workers::ready().is_empty() {
                break;
            }
            sleep(20).await;
        }
        assert!(
            !workers::ready().is_empty(),
            "no curve worker became ready in 20 s"
        );
    }
    let p = headroom_core::presets::find("llama-3.2-1b").expect("preset");
    let s = headroom_web::state::AppState::for_model(p.model());
    let rt = headroom_core::RuntimeProfile::h200();
    let lengths = view_lengths(&s.view, 40);
    let shared = workers::curve(&p.arch, &s.workload, &rt, &lengths, None, || true, |_| {}).await;
    let alone = CurveData::compute(&p.arch, &s.workload, &rt, &s.view, 40);
    assert_eq!(shared.lengths.len(), 40);
    assert_eq!(shared, alone);
    // The page's own curves (workload at length 0, as the page keys them)
    // are answered by the workers too, not recomputed here.
    let before = perf::draws();
    page.type_in("batch", "3");
    wait_until("a redraw", || perf::draws() > before).await;
    assert_eq!(workers::fallbacks(), 0, "worker answers were unusable");
    // Image models whose range starts below the smallest image: the
    // shares still go to the workers, and the rejected sizes are the same.
    let vit = headroom_core::presets::find("vit-b-16").expect("preset");
    let w = headroom_web::state::AppState::for_model(vit.model()).workload;
    let sizes: Vec<u32> = (1..=12).map(|i| i * 4).collect();
    let shared = workers::curve(&vit.arch, &w, &rt, &sizes, None, || true, |_| {}).await;
    let alone = CurveData::from_results(
        &sizes,
        headroom_web::curve::estimate_lengths(&vit.arch, &w, &rt, &sizes),
    );
    assert_eq!(shared, alone);
    assert!(shared.failed > 0, "sizes below 16 px are rejected");
    assert_eq!(workers::fallbacks(), 0, "worker refused an image share");
    console_log!(
        "curve workers: {} ready of {cores} cores",
        workers::ready().len()
    );
}

/// A slow curve (a generation of thousands of tokens replays every decode
/// step at each of 256 lengths) keeps the page responsive: the page's
/// thread yields while it computes, shows how far it is, and drops the
/// curve when an input changes mid-way, drawing the newer one instead.
#[wasm_bindgen_test]
async fn a_slow_curve_shows_progress_and_gives_way_to_a_newer_input() {
    let page = Page::open("model=llama-3.2-1b").await;
    // On a busy machine the first curve comes after the first paint, with
    // its own progress note: the note waited for below is the slow one's.
    page.curve_drawn().await;
    let fallbacks = headroom_web::workers::fallbacks();
    let replaced = headroom_web::workers::replaced();
    let draws = perf::draws();
    page.type_in("new-tokens", "4096");
    // This test's own polling runs between the curve's slices: it sees the
    // progress note only because the page's thread yields.
    wait_until("the progress note", || {
        page.find("curve-progress").is_some()
    })
    .await;
    assert!(
        page.text("curve-progress").contains("Computing the curve"),
        "{}",
        page.text("curve-progress")
    );
    assert_eq!(perf::draws(), draws, "no curve for the new input yet");
    // A change while computing: that curve is dropped, this one drawn.
    page.type_in("batch", "2");
    for _ in 0..3000 {
        if page.find("curve-progress").is_none() && perf::draws() > draws {
            break;
        }
        sleep(20).await;
    }
    assert!(
        page.find("curve-progress").is_none(),
        "the curve never finished"
    );
    assert_eq!(page.chart_attr("data-points"), 256);
    assert_eq!(
        perf::draws(),
        draws + 1,
        "one redraw: the batch-2 curve, not the abandoned one"
    );
    assert_eq!(page.value("batch"), "2");
    // The abandoned curve's worker shares were cancelled, not waited for,
    // and the newer curve's shares were all answered by workers.
    if workers_expected("the abandoned curve's workers were replaced") {
        assert!(
            headroom_web::workers::replaced() > replaced,
            "no worker was cancelled"
        );
    }
    assert_eq!(headroom_web::workers::fallbacks(), fallbacks);
}

/// A shared link to a slow curve opens at once: the curve comes in the
/// background, with its progress shown, instead of before the first paint.
#[wasm_bindgen_test]
async fn a_link_to_a_slow_curve_opens_without_waiting_for_it() {
    let answered = headroom_web::workers::answered_one();
    let page = Page::open("model=llama-3.2-1b&inference.new_tokens=4096").await;
    wait_until("the progress note", || {
        page.find("curve-progress").is_some()
    })
    .await;
    assert_eq!(page.value("new-tokens"), "4096");
    for _ in 0..3000 {
        if page.find("curve-progress").is_none() && page.chart_attr("data-points") == 256 {
            break;
        }
        sleep(20).await;
    }
    assert_eq!(page.chart_attr("data-points"), 256, "the curve arrived");
    assert!(page.find("curve-progress").is_none());
    // The estimate at the chosen length came from a worker after the
    // first paint.
    wait_until("the estimate", || page.find("point-pending").is_none()).await;
    assert!(!page.text("peak-total").is_empty());
    if workers_expected("the estimate came from a worker") {
        assert!(headroom_web::workers::answered_one() > answered);
    }
}

/// The estimate at the chosen length of a long generation is computed off
/// the page's thread, in a worker of its own: the breakdown says it is
/// coming (and the JSON export waits for it), then the estimate arrives; a
/// superseded one's worker is stopped.
#[wasm_bindgen_test]
async fn a_slow_estimate_is_computed_off_the_page_thread() {
    // A short prompt: the decode steps decide the peak.
    let page = Page::open("model=llama-3.2-1b").await;
    page.type_in("seq-len", "128");
    settle().await;
    let before = page.text("breakdown-table");
    assert!(!before.is_empty());
    let answered = headroom_web::workers::answered_one();
    page.type_in("new-tokens", "4096");
    // The input's effects run; no worker message can be handled yet.
    for _ in 0..3 {
        leptos::task::tick().await;
    }
    assert!(page.find("point-pending").is_some(), "no pending note");
    // Exporting the estimate waits for it (no stale estimate with new inputs).
    let exported = last_export().map(|e| e.1);
    page.click("export-json");
    assert_eq!(last_export().map(|e| e.1), exported);
    wait_until("the estimate", || page.find("point-pending").is_none()).await;
    let after = page.text("breakdown-table");
    assert!(!after.is_empty() && after != before, "{before} -> {after}");
    page.click("export-json");
    let (_, json) = last_export().expect("an export");
    assert!(json.contains("\"new_tokens\": 4096"), "{json}");
    if workers_expected("the estimate came from a worker") {
        assert!(
            headroom_web::workers::answered_one() > answered,
            "a worker answered"
        );
    }
    // A slower one, superseded at once: its worker is stopped, unheard.
    let stopped = headroom_web::workers::stopped_one();
    page.type_in("new-tokens", "131072");
    for _ in 0..3 {
        leptos::task::tick().await;
    }
    assert!(page.find("point-pending").is_some(), "no pending note");
    // Back to a quick job: its estimate and curve replace the slow ones.
    page.type_in("new-tokens", "16");
    wait_until("the quick estimate", || {
        page.find("point-pending").is_none() && page.text("breakdown-table") == before
    })
    .await;
    if workers_expected("the superseded estimate's worker was stopped") {
        assert!(
            headroom_web::workers::stopped_one() > stopped,
            "the superseded estimate's worker was stopped"
        );
    }
    for _ in 0..3000 {
        if page.find("curve-progress").is_none() && page.chart_attr("data-points") == 256 {
            break;
        }
        sleep(20).await;
    }
    assert!(page.find("curve-progress").is_none());
}

/// The longest the page's thread may be held while a slow GPU table is
/// computed, ms.
const MAX_POLL_GAP_MS: f64 = 1000.0;

/// A long generation's GPU table comes from a worker of its own: the page
/// stays responsive (this test's polling runs) and the whole table lands
/// at once, as the page's thread would have computed it.
#[wasm_bindgen_test]
async fn a_slow_gpu_table_is_computed_off_the_page_thread() {
    let answered = headroom_web::workers::answered_one();
    let page = Page::open("model=gpt2&seq_len=128&inference.new_tokens=2100").await;
    let mut longest_gap: f64 = 0.0;
    let mut last = perf::now();
    for _ in 0..6000 {
        if page.fit_done() {
            break;
        }
        sleep(20).await;
        longest_gap = longest_gap.max(perf::now() - last);
        last = perf::now();
    }
    assert!(page.fit_done(), "the GPU table never arrived");
    assert!(
        page.find("fit-h200").is_some(),
        "{}",
        page.text("gpu-table")
    );
    console_log!(
        "GPU table of a 2,100-token generation: longest wait between polls {longest_gap:.0} ms"
    );
    // The whole table on the page's thread at once would hold it for
    // seconds; handing control back keeps every wait well under one.
    assert!(
        longest_gap < MAX_POLL_GAP_MS,
        "the page's thread was held for {longest_gap:.0} ms"
    );
    if workers_expected("the GPU table came from a worker") {
        assert!(headroom_web::workers::answered_one() > answered);
    }
}

/// A Llama trained on 8 GPUs with FSDP2: the breakdown is one rank's, the
/// chart plots the peak per GPU, the GPU table gives each card's fewest
/// cards per strategy (the core's answer), a combination the core refuses
/// shows its message by the inputs, and the link brings the job back.
#[wasm_bindgen_test]
async fn a_job_on_several_gpus_shows_per_rank_peaks_and_fewest_cards() {
    use headroom_core::gpus::CATALOG;
    use headroom_web::fit::{fewest_on, fewest_peaks};
    let page = Page::open("model=llama-3.1-8b&mode=training&training.precision=bf16").await;
    page.curve_drawn().await;
    assert!(page.find("per-rank").is_none(), "one GPU: no per-rank note");
    assert!(!page
        .get("chart")
        .get_attribute("aria-label")
        .unwrap()
        .contains("per GPU"));
    page.choose("strategy", "fsdp2");
    settle().await;
    page.type_in("world-size", "8");
    settle().await;
    assert_eq!(page.value("strategy"), "fsdp2");
    assert_eq!(page.value("world-size"), "8");
    assert_eq!(page.text("world-size-error"), "");
    assert_eq!(page.text("parallel-error"), "");
    wait_until("the per-rank estimate", || page.find("per-rank").is_some()).await;
    assert_eq!(page.text("per-rank"), "per rank, 8 GPUs, FSDP2");
    page.curve_drawn().await;
    let label = page.get("chart").get_attribute("aria-label").unwrap();
    assert!(label.contains("Peak VRAM per GPU"), "{label}");

    // The table's fewest cards are the core's, per card and strategy.
    let table = page.fit_table().await;
    assert!(table.contains("Fewest cards: FSDP2"), "{table}");
    let (_, notes) = headroom_web::state::AppState::from_query("", &[]);
    assert!(notes.is_empty());
    let (state, _) = headroom_web::state::AppState::from_query(
        "model=llama-3.1-8b&mode=training&training.precision=bf16&parallel.strategy=fsdp2&parallel.world_size=8",
        &[],
    );
    let rt = headroom_core::RuntimeProfile::h200();
    let peaks = fewest_peaks(&state.model.arch, &state.workload, &rt, state.margin_pct);
    let mut cells = Vec::new();
    for gpu in CATALOG.iter() {
        let (arch, w) = (&state.model.arch, &state.workload);
        for (strategy, n) in fewest_on(&peaks, gpu, arch, w, &rt, state.margin_pct) {
            let expect = match n {
                Ok(Some(n)) => n.to_string(),
                Ok(None) => "—".to_string(),
                Err(e) => panic!("{}: {e}", strategy.key()),
            };
            let id = format!("fit-{}-fewest-{}", gpu.id, strategy.key());
            assert_eq!(page.text(&id), expect, "{id}");
            cells.push(expect);
        }
    }
    assert_eq!(cells.len(), CATALOG.len() * 3);
    assert!(cells.iter().any(|c| c == "—"), "{cells:?}");
    assert!(
        cells.iter().any(|c| c.parse::<u32>().is_ok_and(|n| n > 1)),
        "{cells:?}"
    );
    let h200 = page.text("fit-h200-fewest-fsdp2");
    assert!(h200.parse::<u32>().is_ok(), "{h200}");

    // FSDP2 under autocast: the core's message by the inputs and in the
    // breakdown; no chart of the previous inputs.
    page.choose("precision", "amp_bf16");
    settle().await;
    wait_until("the refusal", || {
        page.text("parallel-error")
            .contains("`workload.training.precision`")
    })
    .await;
    wait_until("the breakdown's error", || {
        page.text("estimate-error")
            .contains("`workload.training.precision`")
    })
    .await;
    wait_until("the curve's error", || {
        page.text("curve-error")
            .contains("`workload.training.precision`")
    })
    .await;
    wait_until("an empty chart", || page.chart_attr("data-points") == 0).await;
    page.choose("precision", "bf16");
    settle().await;
    assert_eq!(page.text("parallel-error"), "");

    // The link carries the job; reloading it brings the inputs back.
    page.click("reshard");
    settle().await;
    let link = page.value("share-link");
    for part in [
        "mode=training",
        "parallel.strategy=fsdp2",
        "parallel.world_size=8",
        "parallel.reshard_after_forward=false",
        "training.precision=bf16",
    ] {
        assert!(link.contains(part), "{link} lacks {part}");
    }
    let query = link.split_once('?').expect("a query").1.to_string();
    drop(page);
    let page = Page::open(&query).await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    assert_eq!(page.value("mode"), "training");
    assert_eq!(page.value("strategy"), "fsdp2");
    assert_eq!(page.value("world-size"), "8");
    assert_eq!(page.value("precision"), "bf16");
    assert!(!page
        .get("reshard")
        .dyn_into::<HtmlInputElement>()
        .unwrap()
        .checked());
    wait_until("the per-rank estimate", || page.find("per-rank").is_some()).await;
    assert_eq!(page.text("per-rank"), "per rank, 8 GPUs, FSDP2");
    assert_eq!(page.value("share-link"), link);
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

/// A pasted or picked config.json that is huge, nested thousands deep,
/// binary or hostile is refused with the reason; its text is shown as
/// text, never as markup.
#[wasm_bindgen_test]
async fn a_huge_nested_binary_or_hostile_config_json_is_refused_with_the_reason() {
    let page = Page::open("").await;
    let import = |text: &str| {
        page.type_in("hf-config", text);
        page.click("hf-import");
    };
    let started = perf::now();
    import(&format!(
        "{{\"model_type\": \"llama\", \"pad\": \"{}\"}}",
        "x".repeat(5_000_000)
    ));
    settle().await;
    // Chromium lays out the 5 MB textarea; the page only refuses it.
    let took = perf::now() - started;
    assert!(took < 15_000.0, "{took:.0} ms");
    let error = page.text("hf-error");
    assert!(
        error.contains("5,000,034 bytes") && error.contains("1,048,576"),
        "{error}"
    );
    import(&"[".repeat(10_000));
    settle().await;
    let error = page.text("hf-error");
    assert!(
        error.contains("nests lists and objects more than 64 levels deep"),
        "{error}"
    );
    import("\u{0}\u{1}\u{2}PK\u{3}\u{4}\u{14}\u{0}\u{8}\u{0}");
    settle().await;
    let error = page.text("hf-error");
    assert!(error.contains("not text"), "{error}");
    assert!(!error.contains('\u{0}'), "{error}");
    import(r#"{"model_type": "<img src=x onerror=alert(1)>\u202e"}"#);
    settle().await;
    let error = page.text("hf-error");
    assert!(
        error.contains("`<img src=x onerror=alert(1)>\\u{202e}` is not supported"),
        "{error}"
    );
    assert_eq!(injected(&page), None);

    // A config that imports, named with markup and control characters.
    import(
        r#"{"model_type": "llama", "_name_or_path": "<script>alert(1)</script>\u001b[2J\u202e", "vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}"#,
    );
    settle().await;
    assert_eq!(page.text("hf-error"), "");
    let summary = page.text("model-summary");
    assert!(
        summary.contains("<script>alert(1)</script>\\u{1b}[2J\\u{202e}"),
        "{summary}"
    );
    assert_eq!(injected(&page), None);
    wait_until("a peak", || !page.text("peak-total").is_empty()).await;
    assert_sane_figures(&page);

    // Files: one too large is refused unread, a binary one as not text.
    let big = js_sys::Array::of1(&JsValue::from_str(&"x".repeat(5_000_000)));
    pick_file(&page, "hf-file", &big, "config.json");
    wait_until("the refusal", || {
        page.text("hf-error").contains("5,000,000 bytes")
    })
    .await;
    assert!(
        page.text("hf-error").contains("1,048,576"),
        "{}",
        page.text("hf-error")
    );
    let bytes = js_sys::Uint8Array::from(&[0x89u8, b'P', b'N', b'G', 0, 0xff, 0xfe, 0x01][..]);
    pick_file(&page, "hf-file", &js_sys::Array::of1(&bytes), "config.json");
    wait_until("the refusal", || page.text("hf-error").contains("not text")).await;
}

/// A profile's name and its GPU's come from a file: shown as text, their
/// control characters escaped; a huge profile is refused unread.
#[wasm_bindgen_test]
async fn a_profile_s_names_are_shown_as_text_and_a_huge_one_is_refused() {
    let page = Page::open("model=llama-3.1-8b").await;
    let profile = r#"{
        "name": "<img src=x onerror=alert(1)>\u202e\u0007",
        "runtime": {"gpu": "<b>card</b>\u001b[31m", "cuda_context_bytes": 500000000},
        "points": [{"case": "<script>alert(2)</script>", "model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 1, "seq_len": 1000, "dtype": "bf16"}, "measured": {"driver_peak": 20000000000}}]
    }"#;
    page.type_in("profile-paste", profile);
    page.click("profile-load");
    settle().await;
    let status = page.text("profile-status");
    assert!(
        status.contains("<img src=x onerror=alert(1)>\\u{202e}\\u{7}"),
        "{status}"
    );
    let figures = page.text("runtime-figures");
    assert!(figures.contains("<b>card</b>\\u{1b}[31m"), "{figures}");
    let options = page.get("profile").text_content().unwrap_or_default();
    assert!(!options.contains(['\u{7}', '\u{202e}']), "{options}");
    let table_hint = page.root.text_content().unwrap_or_default();
    assert!(!table_hint.contains(['\u{7}', '\u{1b}', '\u{202e}']));
    assert_eq!(injected(&page), None);

    page.type_in(
        "profile-paste",
        &format!(
            "{{\"runtime\": {{}}, \"pad\": \"{}\"}}",
            "x".repeat(5_000_000)
        ),
    );
    page.click("profile-load");
    settle().await;
    let status = page.text("profile-status");
    assert!(status.contains("4,194,304"), "{status}");
    let big = js_sys::Array::of1(&JsValue::from_str(&"x".repeat(5_000_000)));
    pick_file(&page, "profile-file", &big, "profile.json");
    wait_until("the refusal", || {
        page.text("profile-status").contains("5,000,000 bytes")
    })
    .await;
}

/// A custom architecture whose job passes 2^60 bytes: the core's refusal
/// is shown by the breakdown and the chart, and no figure is NaN.
#[wasm_bindgen_test]
async fn a_job_too_large_to_replay_shows_the_core_s_refusal() {
    use headroom_core::arch::Architecture;
    let p = headroom_core::presets::find("llama-3.2-1b").expect("preset");
    let mut s = headroom_web::state::AppState::for_model(p.model());
    s.model.id = "custom".into();
    s.model.name = "too large".into();
    let Architecture::Decoder(d) = &mut s.model.arch else {
        panic!("a decoder")
    };
    d.hidden_size = 1 << 20;
    d.num_layers = 32;
    d.num_heads = 256;
    d.num_kv_heads = 8;
    d.head_dim = 4096;
    s.workload.batch = 65536;
    s.workload.seq_len = 4096;
    let page = Page::open(&s.to_query()).await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    wait_until("the breakdown's refusal", || {
        page.text("estimate-error").contains("2^60 bytes")
    })
    .await;
    for _ in 0..3000 {
        if page.text("curve-error").contains("2^60 bytes") {
            break;
        }
        sleep(20).await;
    }
    assert!(
        page.text("curve-error").contains("2^60 bytes"),
        "{}",
        page.text("curve-error")
    );
    page.fit_table().await;
    assert_sane_figures(&page);
}

/// A valid job whose every estimate replays for seconds (a custom model of
/// 1,024 layers generating 8,192 tokens; 2,048 finished within the test's
/// 4 s on a fast idle 2-core host): the page opens at once and its
/// thread is never held long; the estimate, curve and table say they are
/// coming; a quick job afterwards replaces them.
#[wasm_bindgen_test]
async fn a_huge_valid_job_never_holds_the_page_thread() {
    use headroom_core::arch::Architecture;
    let p = headroom_core::presets::find("llama-3.2-1b").expect("preset");
    let mut s = headroom_web::state::AppState::for_model(p.model());
    s.model.id = "custom".into();
    s.model.name = "deep".into();
    let Architecture::Decoder(d) = &mut s.model.arch else {
        panic!("a decoder")
    };
    d.num_layers = 1024;
    s.workload.seq_len = 128;
    s.workload.inference.new_tokens = 8192;
    let started = perf::now();
    let page = Page::open(&s.to_query()).await;
    let open_ms = perf::now() - started;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    let mut longest_gap: f64 = 0.0;
    let mut last = perf::now();
    let until = last + 4000.0;
    while perf::now() < until {
        sleep(20).await;
        longest_gap = longest_gap.max(perf::now() - last);
        last = perf::now();
    }
    console_log!(
        "a 1,024-layer model generating 8,192 tokens: opened in {open_ms:.0} ms, longest wait between polls {longest_gap:.0} ms"
    );
    assert!(open_ms < 1500.0, "the page took {open_ms:.0} ms to open");
    assert!(
        longest_gap < 500.0,
        "the page's thread was held for {longest_gap:.0} ms"
    );
    assert!(page.find("point-pending").is_some(), "no pending note");
    assert!(
        page.text("curve-progress").contains("Computing the curve"),
        "{}",
        page.text("curve-progress")
    );
    assert!(!page.fit_done());
    assert_sane_figures(&page);
    // A quick job: its estimate and curve replace the slow ones.
    page.choose("preset", "gpt2");
    page.type_in("new-tokens", "16");
    wait_until("the quick estimate", || {
        page.find("point-pending").is_none() && !page.text("peak-total").is_empty()
    })
    .await;
    for _ in 0..1500 {
        if page.find("curve-progress").is_none() && page.chart_attr("data-points") == 256 {
            break;
        }
        sleep(20).await;
    }
    assert_eq!(page.chart_attr("data-points"), 256);
    page.fit_table().await;
    assert_sane_figures(&page);
}

// The profile registry. scripts/test.sh starts a headroom-registry on an
// empty database and builds these tests with its address in
// HEADROOM_REGISTRY_URL; it fails unless the REGISTRY line below is logged.

const REGISTRY_URL: Option<&str> = option_env!("HEADROOM_REGISTRY_URL");

/// The committed H200 profile named `name`, with a CUDA context of
/// `context_bytes`.
fn registry_profile(name: &str, context_bytes: u64) -> String {
    let mut p: serde_json::Value = serde_json::from_str(include_str!(
        "../../calibration/profiles/h200-2026-11-30.json"
    ))
    .expect("the committed profile is JSON");
    p["name"] = name.into();
    p["runtime"]["cuda_context_bytes"] = context_bytes.into();
    p["coefficients"]["cuda_context_bytes"]["value"] = context_bytes.into();
    p.to_string()
}

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
    assert_eq!(answer.status(), 201, "{text}");
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

#[wasm_bindgen_test]
async fn a_registry_s_profiles_are_listed_applied_marked_and_linked() {
    let Some(base) = REGISTRY_URL else {
        console_log!("skipped: the registry test reads HEADROOM_REGISTRY_URL at build time (scripts/test.sh sets it)");
        return;
    };
    let name = "<img src=x onerror=alert(1)>Team H200";
    let profile = registry_profile(name, 1_000_000_000);
    let number = upload_profile(base, &profile).await;
    let id = format!("registry-{number}");
    let job = "model=llama-3.1-8b&seq_len=2048";
    let pointed = format!("{job}&registry={}", headroom_web::query::encode(base));

    // The built-in figures, for comparison.
    let page = Page::open(job).await;
    let builtin_peak = peak_total(&page).await;
    let builtin_context = page.text("row-cuda_context");
    assert!(
        page.find("registry-gpu").is_none(),
        "no registry at the page's own origin"
    );
    drop(page);

    // Listed with its facts, its name as text; the GPU table marks the H200.
    let page = Page::open(&pointed).await;
    let option = format!("#profile option[value='{id}']");
    let listed = || {
        page.root
            .query_selector(&option)
            .expect("a valid selector")
            .and_then(|o| o.text_content())
    };
    wait_until("the registry's profiles", || listed().is_some()).await;
    let text = listed().unwrap_or_default();
    for part in [
        name,
        "NVIDIA H200",
        "driver 580.159.04",
        "torch 2.11.0+cu130",
        "CUDA 13.0",
        "points",
        "median error",
        "2026-11-30",
    ] {
        assert!(text.contains(part), "`{text}` lacks {part}");
    }
    assert_eq!(injected(&page), None);
    page.choose("registry-gpu", "h200");
    settle().await;
    assert!(listed().is_some(), "listed for the H200");
    page.fit_table().await;
    wait_until("the GPU table's mark", || {
        page.find("fit-h200-registry").is_some()
    })
    .await;
    assert!(page.find("fit-rtx-4090-registry").is_none());
    assert_eq!(peak_total(&page).await, builtin_peak, "nothing applied yet");

    // Applied: the estimate takes the profile's runtime.
    page.choose("profile", &id);
    wait_until("the profile applied", || {
        page.text("row-cuda_context").contains("1.00 GB")
    })
    .await;
    assert!(
        page.text("profile-status").contains("Applied"),
        "{}",
        page.text("profile-status")
    );
    assert_eq!(page.value("profile"), id);
    assert!(page.text("runtime-figures").contains("954 MiB"));
    let applied_peak = peak_total(&page).await;
    assert_ne!(applied_peak, builtin_peak);
    assert_eq!(injected(&page), None);
    sleep(400).await;
    let link = page.value("share-link");
    assert!(link.contains(&format!("profile={id}")), "{link}");
    assert_eq!(
        window().location().search().unwrap(),
        format!("?{}", link.split_once('?').expect("a query").1),
        "the address bar holds the link"
    );
    drop(page);

    // Exactly as loading the same profile from a file.
    let page = Page::open(job).await;
    page.type_in("profile-paste", &profile);
    page.click("profile-load");
    wait_until("the file's profile", || {
        page.text("row-cuda_context").contains("1.00 GB")
    })
    .await;
    assert_eq!(peak_total(&page).await, applied_peak);
    drop(page);

    // The link opens with the registry's profile applied.
    let page = Page::open(link.split_once('?').expect("a query").1).await;
    wait_until("the linked profile", || {
        page.text("row-cuda_context").contains("1.00 GB")
    })
    .await;
    assert_eq!(page.value("profile"), id);
    assert_eq!(peak_total(&page).await, applied_peak);
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    drop(page);

    // A profile the registry no longer has: a note, the built-in figures.
    let page = Page::open(&format!("{pointed}&profile=registry-999999")).await;
    wait_until("the missing profile's note", || {
        page.text("url-note").contains("#999999")
    })
    .await;
    let note = page.text("url-note");
    for part in ["404", "built-in H200", base] {
        assert!(note.contains(part), "`{note}` lacks {part}");
    }
    assert_eq!(page.value("profile"), "h200");
    assert_eq!(page.text("row-cuda_context"), builtin_context);
    assert_eq!(peak_total(&page).await, builtin_peak);
    assert!(!page.value("share-link").contains("profile="));
    drop(page);

    // A registry that does not answer: a note, the built-in figures.
    let unreachable = format!("{job}&registry=http%3A%2F%2F127.0.0.1%3A9");
    let page = Page::open(&format!("{unreachable}&profile={id}")).await;
    wait_until("the unreachable registry's note", || {
        page.text("url-note").contains("could not be reached")
    })
    .await;
    assert!(page.text("url-note").contains(&format!("#{number}")));
    assert_eq!(peak_total(&page).await, builtin_peak);
    assert!(page.find("registry-gpu").is_none());
    drop(page);
    let page = Page::open(&unreachable).await;
    wait_until("the unlisted registry's note", || {
        page.text("url-note").contains("could not be listed")
    })
    .await;
    drop(page);

    // Links from before the registry open as they did.
    let page = Page::open(&format!("{job}&profile=h200-2026-11-30")).await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    assert_eq!(page.value("profile"), "h200-2026-11-30");
    console_log!("REGISTRY profile #{number} of {base}: listed, applied, marked in the GPU table, linked; a missing and an unreachable one noted");
}

// ---- What would make it fit, memory over the job, narrow and dark pages ----

/// The app state a link opens, as the page reads it.
fn state_of(query: &str) -> headroom_web::state::AppState {
    let ids: Vec<String> = headroom_web::calib::bundled()
        .into_iter()
        .map(|p| p.id)
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    headroom_web::state::AppState::from_query(query, &ids).0
}

/// A "does not fit" in the GPU table opens the core's suggestions for
/// that card, each with its peak and cost; the link carries the card, and
/// the suggestions are the ones `advise` gives natively.
#[wasm_bindgen_test]
async fn a_does_not_fit_link_opens_what_would_make_it_fit() {
    let query = "model=llama-3.2-1b&mode=training&seq_len=2048&batch=4";
    let page = Page::open(query).await;
    page.fit_table().await;
    let gpu_id = "l40s";
    let link = page
        .root
        .query_selector("[data-testid='fit-l40s'] [data-testid='advise-l40s']")
        .expect("a selector")
        .expect("the L40S's \"does not fit\"");
    link.dyn_into::<HtmlElement>().expect("a button").click();
    settle().await;
    wait_until("the suggestions", || {
        page.find("advice").is_some() && page.find("advice-pending").is_none()
    })
    .await;
    assert!(
        page.find("suggestions").is_some(),
        "{}",
        page.text("advice")
    );
    let shown: Vec<String> = {
        let list = page
            .root
            .query_selector_all("[data-testid='suggestion-peak']")
            .expect("a selector");
        (0..list.length())
            .filter_map(|i| list.item(i).and_then(|n| n.text_content()))
            .collect()
    };
    let s = state_of(query);
    let gpu = headroom_core::gpus::find(gpu_id).expect("a catalog card");
    let rt = headroom_core::RuntimeProfile::h200();
    let native = headroom_core::advice::advise(&s.model.arch, &s.workload, &rt, gpu, s.margin_pct)
        .expect("advice");
    assert!(
        !native.is_empty(),
        "the core suggests something for {gpu_id}"
    );
    let expected: Vec<String> = native
        .iter()
        .map(|s| headroom_web::format::bytes(headroom_core::Bytes(s.driver_peak)))
        .collect();
    assert_eq!(shown, expected);
    let first = page.text("suggestion");
    assert!(first.contains(&native[0].what), "{first}");
    assert!(first.contains(native[0].change.cost()), "{first}");
    settle().await;
    sleep(300).await;
    assert!(
        page.value("share-link")
            .contains(&format!("advise={gpu_id}")),
        "{}",
        page.value("share-link")
    );
    page.click("advice-close");
    settle().await;
    assert!(page.find("advice").is_none());
}

/// Memory over the job: the chart's highest reserved point is the peak the
/// page shows and the core computes, its phases run in order, and the CSV
/// holds its points with their phases.
#[wasm_bindgen_test]
async fn the_timeline_shows_the_peak_and_the_phases_and_exports_csv() {
    let query = "model=llama-3.2-1b&mode=training&seq_len=512";
    let page = Page::open(query).await;
    assert!(page.find("timeline").is_none(), "closed until asked for");
    page.click("timeline-toggle");
    wait_until("the timeline", || {
        page.find("timeline")
            .and_then(|c| c.get_attribute("data-max-reserved"))
            .is_some()
    })
    .await;
    let s = state_of(query);
    let rt = headroom_core::RuntimeProfile::h200();
    let estimate = headroom_core::estimate(&s.model.arch, &s.workload, &rt).expect("an estimate");
    let attr = |name: &str| page.get("timeline").get_attribute(name).unwrap_or_default();
    assert_eq!(
        attr("data-max-reserved"),
        estimate.reserved_peak.0.to_string()
    );
    assert_eq!(
        attr("data-max-allocated"),
        estimate.allocated_peak.0.to_string()
    );
    assert_eq!(
        page.text("timeline-peak"),
        headroom_web::format::bytes(estimate.reserved_peak)
    );
    let phases = attr("data-phases");
    assert!(
        phases
            .starts_with("load|forward, step 0|backward, step 0|optimizer, step 0|forward, step 1"),
        "{phases}"
    );
    assert!(page.text("timeline-live").contains("weights"));
    page.click("timeline-csv");
    let (name, csv) = last_export().expect("an export");
    assert_eq!(name, "headroom-llama-3.2-1b-timeline.csv");
    let rows: Vec<&str> = csv.lines().collect();
    assert!(
        rows[0].starts_with("first_event,events,phase,"),
        "{}",
        rows[0]
    );
    assert_eq!(
        rows.len() as u32,
        1 + page.chart_attr_of("timeline", "data-points")
    );
    // The last columns: reserved bytes, then driver-level bytes.
    assert!(
        rows[0].ends_with(",reserved_bytes,driver_bytes"),
        "{}",
        rows[0]
    );
    let top = rows[1..]
        .iter()
        .map(|r| {
            r.rsplit(',')
                .nth(1)
                .expect("a reserved column")
                .parse::<u64>()
                .expect("bytes")
        })
        .max();
    assert_eq!(top, Some(estimate.reserved_peak.0));
    assert!(
        rows[1].starts_with("0,") && rows[1].contains(",\"load\","),
        "{}",
        rows[1]
    );
    page.click("timeline-png");
    let (name, png) = last_export().expect("an export");
    assert_eq!(name, "headroom-llama-3.2-1b-timeline.png");
    assert!(png.starts_with("data:image/png"));
    settle().await;
    sleep(300).await;
    assert!(page.value("share-link").contains("timeline=1"));
}

/// Links carry the open panels, and links from before them open as before.
#[wasm_bindgen_test]
async fn links_open_the_advice_and_the_timeline_and_old_links_still_open() {
    let page = Page::open("model=llama-3.1-8b&advise=rtx-4090&timeline=1").await;
    assert!(page.find("advice").is_some());
    assert!(
        page.text("advice").contains("RTX 4090"),
        "{}",
        page.text("advice")
    );
    assert!(page.find("timeline").is_some());
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    drop(page);
    let page = Page::open("model=gpt2&batch=3&seq_len=777&x=lin&margin=20&gpus=h200,").await;
    assert!(page.find("url-note").is_none(), "{}", page.text("url-note"));
    assert!(page.find("advice").is_none() && page.find("timeline").is_none());
    assert_eq!(page.value("batch"), "3");
    assert!(!page.text("peak-total").is_empty());
}

/// The page's stylesheet, with the dark scheme's media query made to
/// match when `dark`.
fn stylesheet(dark: bool) -> String {
    let css = include_str!("../style.css");
    if dark {
        css.replace("(prefers-color-scheme: dark)", "all")
    } else {
        css.to_string()
    }
}

/// At a phone's width (a 390 px frame with the page's stylesheet) nothing
/// is wider than the screen and the answer is in view.
#[wasm_bindgen_test]
async fn at_phone_width_nothing_overflows_and_the_answer_shows() {
    let doc = window().document().expect("a document");
    let frame: web_sys::HtmlIFrameElement = doc
        .create_element("iframe")
        .expect("an iframe")
        .unchecked_into();
    frame.set_width("390");
    frame.set_height("844");
    let _ = frame.set_attribute("style", "border: 0");
    doc.body()
        .expect("a body")
        .append_child(&frame)
        .expect("append");
    let inner = frame.content_document().expect("the frame's document");
    let style = inner.create_element("style").expect("a style");
    style.set_text_content(Some(&stylesheet(false)));
    inner
        .head()
        .expect("a head")
        .append_child(&style)
        .expect("append");
    let root = inner.create_element("div").expect("a div");
    inner
        .body()
        .expect("a body")
        .append_child(&root)
        .expect("append");
    let handle = mount_to(root.clone().unchecked_into::<HtmlElement>(), App);
    let page = Page {
        root,
        _handle: Box::new(handle),
    };
    settle().await;
    page.fit_table().await;
    let html = inner.document_element().expect("an html element");
    assert_eq!(
        frame
            .content_window()
            .expect("a window")
            .inner_width()
            .ok()
            .and_then(|w| w.as_f64()),
        Some(390.0)
    );
    assert!(
        html.scroll_width() <= 390,
        "the page is {} px wide at 390 px",
        html.scroll_width()
    );
    let peak = page.get("peak-total").get_bounding_client_rect();
    assert!(peak.width() > 0.0 && peak.left() >= 0.0 && peak.right() <= 390.0);
    for id in ["chart", "breakdown", "gpu-table"] {
        let wrap = page.get(id).get_bounding_client_rect();
        let shown = if id == "gpu-table" {
            page.get(id)
                .parent_element()
                .expect("its wrap")
                .get_bounding_client_rect()
        } else {
            wrap
        };
        assert!(shown.right() <= 390.0, "{id} ends at {} px", shown.right());
    }
    // The answer on the first screen (844 px): the chart and the peak come
    // before the inputs, which follow below. (The test runner's own query
    // string makes the page note parts of its link it cannot read; a
    // visitor's page has no such note.)
    if let Some(dismiss) = page.find("dismiss-note") {
        dismiss.unchecked_into::<HtmlElement>().click();
        settle().await;
    }
    let chart_top = page.get("chart").get_bounding_client_rect().top();
    let peak = page.get("peak-total").get_bounding_client_rect();
    assert!(chart_top < 844.0, "the chart starts at {chart_top} px");
    assert!(
        peak.bottom() < 844.0,
        "the peak ends at {} px",
        peak.bottom()
    );
    let inputs = inner
        .query_selector(".controls")
        .expect("a selector")
        .expect("the inputs");
    assert!(
        inputs.get_bounding_client_rect().top() > chart_top,
        "the inputs follow the answer"
    );
    console_log!(
        "PHONE at 390 px: the chart at {chart_top:.0} px, the peak at {:.0} px, the inputs at {:.0} px",
        peak.top(),
        inputs.get_bounding_client_rect().top()
    );
    // The GPU table scrolls within its box, and its box shows it can.
    let wrap = page.get("gpu-table").parent_element().expect("its wrap");
    assert!(
        wrap.scroll_width() > wrap.client_width(),
        "the table is wider than a phone"
    );
    let background = frame
        .content_window()
        .expect("a window")
        .get_computed_style(&wrap)
        .expect("a style")
        .expect("computed")
        .get_property_value("background-image")
        .expect("background-image");
    assert!(
        background.contains("gradient"),
        "no scroll cue: {background}"
    );
    drop(page);
    frame.remove();
}

/// Relative luminance of an sRGB colour (WCAG).
fn luminance([r, g, b]: [f64; 3]) -> f64 {
    let c = |v: f64| {
        let v = v / 255.0;
        if v <= 0.03928 {
            v / 12.92
        } else {
            ((v + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * c(r) + 0.7152 * c(g) + 0.0722 * c(b)
}

fn contrast(a: [f64; 3], b: [f64; 3]) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// `rgb(r, g, b)` or `rgba(r, g, b, a)`: the colour and its alpha.
fn css_rgb(text: &str) -> ([f64; 3], f64) {
    let inner = text
        .trim_start_matches("rgba(")
        .trim_start_matches("rgb(")
        .trim_end_matches(')');
    let v: Vec<f64> = inner
        .split(',')
        .map(|p| p.trim().parse().unwrap_or(0.0))
        .collect();
    ([v[0], v[1], v[2]], v.get(3).copied().unwrap_or(1.0))
}

/// The colour `el`'s text is drawn on: the first opaque background of it
/// or an ancestor.
fn background_of(el: &Element) -> [f64; 3] {
    let mut at = Some(el.clone());
    while let Some(e) = at {
        let style = window()
            .get_computed_style(&e)
            .ok()
            .flatten()
            .expect("a style");
        let (rgb, alpha) = css_rgb(
            &style
                .get_property_value("background-color")
                .unwrap_or_default(),
        );
        if alpha > 0.5 {
            return rgb;
        }
        at = e.parent_element();
    }
    [255.0, 255.0, 255.0]
}

/// The darkest and the lightest pixel of a canvas.
fn canvas_extremes(canvas: &Element) -> ([f64; 3], [f64; 3]) {
    let canvas: web_sys::HtmlCanvasElement = canvas.clone().unchecked_into();
    let ctx: web_sys::CanvasRenderingContext2d = canvas
        .get_context("2d")
        .ok()
        .flatten()
        .expect("a 2D context")
        .unchecked_into();
    let data = ctx
        .get_image_data(0.0, 0.0, canvas.width() as f64, canvas.height() as f64)
        .expect("its pixels")
        .data();
    let mut dark = [255.0; 3];
    let mut light = [0.0; 3];
    for px in data.chunks(4) {
        let rgb = [px[0] as f64, px[1] as f64, px[2] as f64];
        if luminance(rgb) < luminance(dark) {
            dark = rgb;
        }
        if luminance(rgb) > luminance(light) {
            light = rgb;
        }
    }
    (dark, light)
}

/// With the system's dark scheme (the stylesheet's dark media query and
/// `matchMedia` answering dark), the charts and tables are light on dark.
#[wasm_bindgen_test]
async fn in_the_dark_scheme_text_is_light_on_dark() {
    let doc = window().document().expect("a document");
    let storage = window().local_storage().ok().flatten().expect("storage");
    let _ = storage.remove_item("headroom-theme");
    let real_match_media =
        js_sys::Reflect::get(&window(), &"matchMedia".into()).expect("matchMedia");
    let dark_match_media = js_sys::Function::new_with_args(
        "q",
        "return { matches: q.indexOf('dark') >= 0, media: q, onchange: null, addListener() {}, removeListener() {}, addEventListener() {}, removeEventListener() {} };",
    );
    js_sys::Reflect::set(&window(), &"matchMedia".into(), &dark_match_media).expect("set");
    let style = doc.create_element("style").expect("a style");
    style.set_text_content(Some(&stylesheet(true)));
    doc.head()
        .expect("a head")
        .append_child(&style)
        .expect("append");

    let page = Page::open("model=llama-3.2-1b&timeline=1").await;
    page.curve_drawn().await;
    page.fit_table().await;
    wait_until("the timeline", || {
        page.find("timeline")
            .and_then(|c| c.get_attribute("data-max-reserved"))
            .is_some()
    })
    .await;
    for id in ["chart", "timeline"] {
        let (dark, light) = canvas_extremes(&page.get(id));
        assert!(
            luminance(dark) < 0.05,
            "{id}'s background {dark:?} is not dark"
        );
        assert!(contrast(dark, light) >= 7.0, "{id}: {light:?} on {dark:?}");
    }
    for id in ["gpu-table", "breakdown-table", "timeline-live"] {
        let cell = page
            .get(id)
            .query_selector("td, th")
            .expect("a selector")
            .expect("a cell");
        let style = window()
            .get_computed_style(&cell)
            .ok()
            .flatten()
            .expect("a style");
        let (text, _) = css_rgb(&style.get_property_value("color").unwrap_or_default());
        let back = background_of(&cell);
        assert!(
            luminance(back) < 0.05,
            "{id}'s background {back:?} is not dark"
        );
        assert!(contrast(text, back) >= 4.5, "{id}: {text:?} on {back:?}");
    }
    drop(page);
    style.remove();
    js_sys::Reflect::set(&window(), &"matchMedia".into(), &real_match_media).expect("restore");
}

/// A convolutional network's memory format: the select shows for a ResNet
/// and not for an LLM; choosing `channels_last` lowers the training peak
/// (no layout copies) and goes into the link, which restores it.
#[wasm_bindgen_test]
async fn the_memory_format_select_changes_the_peak_and_the_link() {
    let gb = |text: String| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.replace(',', "").parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a number in {text:?}"))
    };
    let page = Page::open("model=resnet-18&mode=training&batch=256&image_size=224").await;
    assert_eq!(page.value("memory_format"), "contiguous");
    let nchw = gb(peak_total(&page).await);
    page.choose("memory_format", "channels_last");
    settle().await;
    wait_until("a lower peak", || {
        let text = page.text("peak-total");
        !text.is_empty() && gb(text) < nchw
    })
    .await;
    let link = page.value("share-link");
    assert!(link.contains("memory_format=channels_last"), "{link}");
    drop(page);

    let page = Page::open(
        "model=resnet-18&mode=training&batch=256&image_size=224&memory_format=channels_last",
    )
    .await;
    assert_eq!(page.value("memory_format"), "channels_last");
    assert!(gb(peak_total(&page).await) < nchw);
    drop(page);

    let page = Page::open("model=llama-3.2-1b").await;
    assert!(
        page.find("memory_format").is_none(),
        "no memory format for an LLM"
    );
}

/// fp16 mixed precision and gradient accumulation: the precision select
/// offers `amp_fp16`, the accumulation field raises a training job's peak
/// (a second set of gradients is held through the later micro-batches),
/// and the link carries both and opens them again.
#[wasm_bindgen_test]
async fn gradient_accumulation_raises_the_peak_and_rides_in_the_link() {
    let gb = |text: String| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.replace(',', "").parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a number in {text:?}"))
    };
    let page = Page::open("model=gpt2&mode=training&batch=4&seq_len=1024").await;
    assert_eq!(page.value("grad-accum"), "1");
    let single = gb(peak_total(&page).await);
    page.choose("precision", "amp_fp16");
    page.type_in("grad-accum", "4");
    settle().await;
    wait_until("a higher peak", || {
        let text = page.text("peak-total");
        !text.is_empty() && gb(text) > single
    })
    .await;
    let link = page.value("share-link");
    assert!(link.contains("training.precision=amp_fp16"), "{link}");
    assert!(
        link.contains("training.gradient_accumulation_steps=4"),
        "{link}"
    );
    drop(page);

    let page = Page::open(
        "model=gpt2&mode=training&batch=4&seq_len=1024&training.precision=amp_fp16&training.gradient_accumulation_steps=4",
    )
    .await;
    assert_eq!(page.value("precision"), "amp_fp16");
    assert_eq!(page.value("grad-accum"), "4");
    assert!(gb(peak_total(&page).await) > single);
}

/// An inference loop of several batches: the field is offered for a
/// vision model, the peak is then found in a later batch (its op says
/// which), and the link carries the count and opens it again. ESMFold's
/// page does not offer it.
#[wasm_bindgen_test]
async fn inference_batches_name_the_peaks_batch_and_ride_in_the_link() {
    let page = Page::open("model=resnet-50&batch=256&image_size=224&dtype=fp16").await;
    assert_eq!(page.value("inference-batches"), "1");
    let single = peak_total(&page).await;
    assert!(
        !page.text("peak-op").contains("batch"),
        "{}",
        page.text("peak-op")
    );
    page.type_in("inference-batches", "3");
    settle().await;
    wait_until("the peak op of a later batch", || {
        page.text("peak-op").starts_with("batch ")
    })
    .await;
    let link = page.value("share-link");
    assert!(link.contains("inference.batches=3"), "{link}");
    drop(page);

    let page =
        Page::open("model=resnet-50&batch=256&image_size=224&dtype=fp16&inference.batches=3").await;
    assert_eq!(page.value("inference-batches"), "3");
    assert_eq!(peak_total(&page).await, single);
    drop(page);

    let page = Page::open("model=esmfold-v1&seq_len=256").await;
    assert!(
        page.find("inference-batches").is_none(),
        "ESMFold folds one protein per estimate"
    );
}

/// A padded batch: the checkbox is offered for a decoder whose padding is
/// modelled, ticking it raises a training job's peak (repeated keys and
/// SDPA's bias in every layer), the link carries it and opens it again,
/// and Gemma 2's page does not offer it.
#[wasm_bindgen_test]
async fn a_padded_batch_raises_the_peak_and_rides_in_the_link() {
    let gb = |text: String| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.replace(',', "").parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a number in {text:?}"))
    };
    let checked = |page: &Page| {
        page.get("padded")
            .dyn_into::<HtmlInputElement>()
            .expect("a checkbox")
            .checked()
    };
    let job = "model=llama-3.2-1b&mode=training&batch=8&seq_len=2048";
    let page = Page::open(job).await;
    assert!(!checked(&page));
    let unpadded = gb(peak_total(&page).await);
    page.click("padded");
    settle().await;
    wait_until("a higher peak", || {
        let text = page.text("peak-total");
        !text.is_empty() && gb(text) > unpadded
    })
    .await;
    let link = page.value("share-link");
    assert!(link.contains("padded=true"), "{link}");
    drop(page);

    let page = Page::open(&format!("{job}&padded=true")).await;
    assert!(checked(&page));
    assert!(gb(peak_total(&page).await) > unpadded);
    drop(page);

    let page = Page::open("model=gemma-2-9b").await;
    assert!(page.find("padded").is_none(), "not offered for Gemma 2");
}

/// Beam search: typing a beam count runs every prompt as that many rows
/// (the peak rises as a batch that many times larger would), the link
/// carries it, and the link's page shows it again.
#[wasm_bindgen_test]
async fn beams_raise_the_peak_and_ride_in_the_link() {
    let gb = |text: String| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.replace(',', "").parse::<f64>().ok())
            .unwrap_or_else(|| panic!("a number in {text:?}"))
    };
    let job = "model=llama-3.2-1b&batch=2&seq_len=2048";
    let page = Page::open(job).await;
    assert_eq!(page.value("num-beams"), "1");
    let greedy = gb(peak_total(&page).await);
    page.type_in("num-beams", "4");
    settle().await;
    wait_until("a higher peak", || {
        let text = page.text("peak-total");
        !text.is_empty() && gb(text) > greedy
    })
    .await;
    let beams = gb(page.text("peak-total"));
    let link = page.value("share-link");
    assert!(link.contains("inference.num_beams=4"), "{link}");
    drop(page);

    let page = Page::open(&format!("{job}&inference.num_beams=4")).await;
    assert_eq!(page.value("num-beams"), "4");
    assert_eq!(gb(peak_total(&page).await), beams);
    drop(page);

    // Four beams over two prompts peak as a greedy batch of eight.
    let page = Page::open("model=llama-3.2-1b&batch=8&seq_len=2048").await;
    assert_eq!(gb(peak_total(&page).await), beams);
}

#[wasm_bindgen_test]
async fn the_committed_h100_profile_marks_the_h100_row_as_measured() {
    let Some(base) = REGISTRY_URL else {
        console_log!("skipped: the registry test reads HEADROOM_REGISTRY_URL at build time (scripts/test.sh sets it)");
        return;
    };
    // The profile `calibrate` made on an H100 80GB HBM3 and uploaded to a
    // registry, as committed.
    let profile = include_str!("../../calibration/profiles/h100-2026-12-07.json");
    upload_profile(base, profile).await;
    let job = "model=llama-3.1-8b&seq_len=2048";
    let page = Page::open(&format!(
        "{job}&registry={}",
        headroom_web::query::encode(base)
    ))
    .await;
    page.fit_table().await;
    wait_until("the H100 row's mark", || {
        page.find("fit-h100-80gb-registry").is_some()
    })
    .await;
    assert!(page.text("fit-h100-80gb-registry").contains("measured"));
    assert!(page.find("fit-rtx-5090-registry").is_none());
}

/// index.html's loading frame (title, one line, "Loading the calculator")
/// shows until the calculator's `.page` is in the body, then style.css
/// hides it.
#[wasm_bindgen_test]
async fn the_loading_frame_is_hidden_once_the_calculator_mounts() {
    let document = window().document().expect("a document");
    let style = document.create_element("style").expect("a style element");
    style.set_text_content(Some(include_str!("../style.css")));
    document
        .head()
        .expect("a head")
        .append_child(&style)
        .expect("appended");
    let body = document.body().expect("a body");
    let loading = document.create_element("div").expect("a div");
    loading.set_class_name("loading");
    body.append_child(&loading).expect("appended");
    let display = |e: &Element| {
        window()
            .get_computed_style(e)
            .expect("a style")
            .expect("computed")
            .get_property_value("display")
            .expect("display")
    };
    assert!(
        document
            .query_selector("body > .page")
            .expect("a selector")
            .is_none(),
        "the tests mount the calculator inside their own root, not the body"
    );
    assert_eq!(display(&loading), "block", "shown while nothing is mounted");
    let page = document.create_element("div").expect("a div");
    page.set_class_name("page");
    body.append_child(&page).expect("appended");
    assert_eq!(display(&loading), "none", "hidden beside the calculator");
    loading.remove();
    page.remove();
    style.remove();
}
