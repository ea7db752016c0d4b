//! The page's messages in its own words: a spec's field key or serde's
//! wording only in a message's details line.

use crate::{settle, wait_until, Page};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::Element;

/// What a message must not say outside its details line.
const RAW: &[&str] = &[
    "workload.",
    "`model`",
    "invalid type",
    "invalid value",
    "expected u64",
    "expected u32",
    "expected f64",
    "expected a boolean",
    "known presets include",
];

/// The text of every message the page shows (alerts, errors, notes),
/// without its details lines.
fn messages(page: &Page) -> Vec<String> {
    let found = page
        .root
        .query_selector_all("[role=alert], .error, .note")
        .expect("a valid selector");
    let mut out = Vec::new();
    for i in 0..found.length() {
        let node: Element = found
            .item(i)
            .and_then(|n| n.clone_node_with_deep(true).ok())
            .and_then(|n| n.dyn_into().ok())
            .expect("an element");
        let details = node
            .query_selector_all(".detail")
            .expect("a valid selector");
        for j in 0..details.length() {
            if let Some(d) = details.item(j) {
                d.parent_node().and_then(|p| p.remove_child(&d).ok());
            }
        }
        let text = node.text_content().unwrap_or_default();
        if !text.trim().is_empty() {
            out.push(text);
        }
    }
    out
}

#[track_caller]
fn assert_in_words(shown: &[String]) {
    for message in shown {
        for raw in RAW {
            assert!(!message.contains(raw), "`{raw}` in a message: {message}");
        }
    }
}

#[wasm_bindgen_test]
async fn messages_use_the_forms_labels_and_keep_the_key_in_a_details_line() {
    // A link with bad values: the note names the form's labels.
    let page = Page::open("model=nope-7b&batch=NaN&seq_len=-5&mode=bogus").await;
    let shown = messages(&page);
    assert!(!shown.is_empty());
    assert_in_words(&shown);
    let note = shown.join(" ");
    for part in [
        "Batch size: “NaN” is not a whole number",
        "Sequence length: -5 is not a whole number",
        "Model: unknown preset `nope-7b`; search the model list",
        "Mode: unknown mode `bogus`",
    ] {
        assert!(note.contains(part), "`{part}` not in {note}");
    }
    // The details lines keep the core's message, key included.
    let details = page.text("url-note");
    assert!(
        details.contains("`workload.batch`: invalid type"),
        "{details}"
    );
    assert!(details.contains("known presets include"), "{details}");
    page.click("dismiss-note");
    settle().await;

    // The form's own checks, and the core's.
    page.type_in("batch", "");
    settle().await;
    assert_eq!(
        messages(&page).join(" "),
        "Batch size: nothing typed; allowed: a whole number from 1 to 65536"
    );
    assert!(page.text("batch-error").contains("`workload.batch`"));
    page.type_in("batch", "70000");
    settle().await;
    let shown = messages(&page).join(" ");
    assert!(
        shown.starts_with("Batch size: “70000” is out of range"),
        "{shown}"
    );
    page.type_in("batch", "2");
    settle().await;
    assert!(messages(&page).is_empty(), "{:?}", messages(&page));

    // A combination the core refuses: by the inputs, in the breakdown and
    // under the chart, each in words.
    drop(page);
    let page = Page::open(
        "model=llama-3.1-8b&mode=training&training.precision=amp_bf16&parallel.strategy=fsdp2&parallel.world_size=8",
    )
    .await;
    wait_until("the refusals", || {
        !page.text("parallel-error").is_empty()
            && !page.text("estimate-error").is_empty()
            && !page.text("curve-error").is_empty()
    })
    .await;
    let shown = messages(&page);
    assert_in_words(&shown);
    assert!(shown.iter().any(|m| m.contains("Precision:")), "{shown:?}");
    assert!(page
        .text("parallel-error")
        .contains("`workload.training.precision`"));
}
