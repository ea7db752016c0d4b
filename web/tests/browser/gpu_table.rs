//! The GPU table: a slow table off the page's thread, several GPUs and fewest cards, the measured H100 row.

use crate::{settle, sleep, upload_profile, wait_until, workers_expected, Page, REGISTRY_URL};
use headroom_web::app::perf;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};
use web_sys::HtmlInputElement;

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
    use headroom_web::gpu_rows::{fewest_on, fewest_peaks};
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

#[wasm_bindgen_test]
async fn the_committed_h100_profile_in_the_registry_marks_the_h100_row() {
    let Some(base) = REGISTRY_URL else {
        console_log!("skipped: the registry test reads HEADROOM_REGISTRY_URL at build time (scripts/test.sh sets it)");
        return;
    };
    // The profile `calibrate` made on an H100 80GB HBM3 and uploaded to a
    // registry, as committed.
    let profile = include_str!("../../../calibration/profiles/h100-2026-12-07.json");
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
    // In the registry, not applied: the estimates use the built-in H200
    // profile, whose row says "measured".
    assert_eq!(
        page.text("fit-h100-80gb-registry"),
        "profile in the registry"
    );
    assert_eq!(page.text("fit-h200-registry"), "measured");
    assert!(page.find("fit-rtx-5090-registry").is_none());
}

/// Chunked ESMFold at 1,500 residues peaks at 37.40 GB unlimited: the RTX
/// 5090 row says it runs one job only by PyTorch freeing its cache at the
/// card's end, with the replay's peak on the card, and reserves the whole
/// card rather than the unlimited figure; the H200 row fits it outright.
#[wasm_bindgen_test]
async fn a_row_that_fits_only_by_freeing_the_cache_says_so_and_reserves_the_card() {
    let page = Page::open("model=esmfold-v1&seq_len=1500&esmfold.chunk_size=64").await;
    page.fit_table().await;
    let jobs = page.text("fit-rtx-5090-jobs");
    assert!(
        jobs.starts_with("1: ") && jobs.ends_with(" GB here, freeing cache at the card's end"),
        "{jobs}"
    );
    let usable = headroom_core::gpus::find("rtx-5090").unwrap().usable_bytes;
    assert_eq!(
        page.text("fit-rtx-5090-reserve"),
        headroom_web::format::mib(headroom_core::Bytes(usable))
    );
    let on_card: f64 = jobs[3..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(on_card * 1e9 < usable as f64, "{jobs}");
    assert!(!page.text("fit-h200-jobs").contains("freeing"));
}
