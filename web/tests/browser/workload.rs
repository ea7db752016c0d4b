//! Workload inputs: memory format, gradient accumulation, inference batches, padding and beams.

use crate::{peak_total, settle, wait_until, Page};
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::HtmlInputElement;

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

/// Defaults that answer the question asked: switching LoRA on turns
/// gradient checkpointing on (its switch in view, and it turns off), the
/// base weights' dtype sits right after the LoRA switch, and the chart's
/// range follows the job's length.
#[wasm_bindgen_test]
async fn lora_turns_checkpointing_on_and_the_range_follows_the_job() {
    let page = Page::open("model=llama-3.1-8b&mode=training").await;
    let checked = |id: &str| page.get(id).unchecked_into::<HtmlInputElement>().checked();
    assert!(!checked("grad-ckpt"));
    assert!(
        page.find("dtype").is_none(),
        "no dtype select without LoRA in training"
    );
    page.get("lora")
        .unchecked_into::<HtmlInputElement>()
        .click();
    settle().await;
    assert!(checked("lora") && checked("grad-ckpt"));
    let link = page.value("share-link");
    assert!(link.contains("training.grad_checkpointing=true"), "{link}");
    // The base dtype select follows the LoRA switch, before its rank.
    let ids: Vec<String> = {
        let all = page.root.query_selector_all("[data-testid]").unwrap();
        (0..all.length())
            .filter_map(|i| all.item(i))
            .filter_map(|n| n.dyn_into::<web_sys::Element>().ok())
            .filter_map(|e| e.get_attribute("data-testid"))
            .collect()
    };
    let at = |id: &str| {
        ids.iter()
            .position(|x| x == id)
            .unwrap_or_else(|| panic!("{id} in {ids:?}"))
    };
    assert_eq!(at("dtype"), at("lora") + 1, "{ids:?}");
    assert!(at("lora-rank") > at("dtype"));
    // Checkpointing can still be turned off with LoRA on.
    page.get("grad-ckpt")
        .unchecked_into::<HtmlInputElement>()
        .click();
    settle().await;
    assert!(checked("lora") && !checked("grad-ckpt"));
    drop(page);

    // The default job's chart spans 128 to 32,768 tokens; a link with a
    // longer job spans 8 times that job's length.
    let page = Page::open("model=llama-3.1-8b").await;
    assert_eq!(
        (page.value("range-from"), page.value("range-to")),
        ("128".into(), "32768".into())
    );
    drop(page);
    let page = Page::open("model=llama-3.1-8b&seq_len=65536").await;
    assert_eq!(page.value("range-to"), "524288");
    assert!(
        !page.value("share-link").contains("to="),
        "{}",
        page.value("share-link")
    );
}

/// A job described as its author wrote it: the Trainer's arguments pasted
/// under "How do you run it?" set the form (read in the panels module),
/// and the peak is the command line's for the same spec; an argument the
/// Trainer does not know is refused by name.
#[wasm_bindgen_test]
async fn pasted_training_arguments_set_the_form_as_the_command_line_reads_them() {
    let args = r#"{"per_device_train_batch_size": 4, "bf16": true, "gradient_checkpointing": true, "output_dir": "out"}"#;
    let page = Page::open("model=llama-3.2-1b&seq_len=1024").await;
    page.choose("framework", "hf_trainer");
    page.type_in("framework-args", args);
    page.click("framework-apply");
    wait_until("the arguments applied", || {
        page.text("framework-status").contains("Applied")
    })
    .await;
    let checked = |id: &str| page.get(id).unchecked_into::<HtmlInputElement>().checked();
    assert_eq!(page.value("mode"), "training");
    assert_eq!(page.value("batch"), "4");
    assert_eq!(page.value("seq-len"), "1024", "the length is kept");
    assert!(checked("grad-ckpt"));
    assert_eq!(page.value("precision"), "amp_bf16");
    let spec = headroom_core::readers::Spec::from_json(&format!(
        r#"{{"model": "llama-3.2-1b", "workload": {{"framework": "hf_trainer", "seq_len": 1024, "training_args": {args}}}}}"#
    ))
    .expect("the command line's spec");
    let estimate = headroom_core::estimate(
        &spec.model.arch,
        &spec.workload,
        &headroom_core::RuntimeProfile::h200(),
    )
    .expect("an estimate");
    let expected = headroom_web::format::bytes(estimate.driver_peak);
    wait_until("the command line's peak", || {
        peak_total_now(&page) == expected
    })
    .await;

    page.type_in("framework-args", r#"{"per_device_batch": 4}"#);
    page.click("framework-apply");
    wait_until("the refusal", || {
        page.text("framework-status").contains("per_device_batch")
    })
    .await;
    assert_eq!(page.value("batch"), "4", "a refused paste changes nothing");
}

/// The breakdown's peak as shown now (empty while it is computed).
fn peak_total_now(page: &Page) -> String {
    page.text("peak-total")
}
