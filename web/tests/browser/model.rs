//! The model panel: presets, the length, config.json import and Hub ids.

use crate::{assert_sane_figures, injected, pick_file, settle, wait_until, window, Page};
use headroom_web::app::perf;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::wasm_bindgen_test;

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
    let config = r#"{"_name_or_path": "/home/someone/checkpoints/llama", "model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
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
