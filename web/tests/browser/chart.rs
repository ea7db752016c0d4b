//! The chart: the curve, redraw timing, worker threads, slow curves and estimates, CSV export.

use crate::{assert_sane_figures, settle, sleep, wait_until, window, workers_expected, Page};
use headroom_web::app::perf::Milestone;
use headroom_web::app::{last_export, perf};
use wasm_bindgen_test::{console_log, wasm_bindgen_test};
use web_sys::Element;

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
