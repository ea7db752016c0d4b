//! The advice panel (what would make it fit) and the timeline (memory over the job).

use crate::{settle, sleep, wait_until, window, Page};
use headroom_web::app::last_export;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::wasm_bindgen_test;
use web_sys::HtmlElement;

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
    // A screen reader names each row's button by its card.
    let named = link.get_attribute("aria-label").unwrap_or_default();
    assert_eq!(
        named,
        "Does not fit the NVIDIA L40S: what would make it fit"
    );
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
    let focused = window()
        .document()
        .and_then(|d| d.active_element())
        .and_then(|e| e.get_attribute("data-testid"));
    assert_eq!(
        focused.as_deref(),
        Some("advice"),
        "focus moves to the panel"
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
    // Each change in the form's words, the spec's keys only in a details
    // line; an Apply link opens the page with the change made.
    let words = page.text("suggestion-words");
    assert!(!words.is_empty() && !words.contains("workload."), "{words}");
    let applies = page
        .root
        .query_selector_all("[data-testid='suggestion-apply']")
        .expect("a selector");
    let applicable: Vec<&headroom_core::advice::Suggestion> =
        native.iter().filter(|s| s.runtime == rt).collect();
    assert_eq!(applies.length() as usize, applicable.len());
    let href = applies
        .item(0)
        .and_then(|n| n.dyn_into::<web_sys::Element>().ok())
        .and_then(|a| a.get_attribute("href"))
        .expect("an Apply link");
    let applied = state_of(&href);
    assert_eq!(applied.workload, applicable[0].workload, "{href}");
    assert_eq!(applied.model, s.model);
    assert_eq!(applied.panels.advise, None);
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
    drop(page);
    // Opened, the applied link's form holds the suggestion.
    let page = Page::open(href.trim_start_matches('?')).await;
    assert_eq!(
        page.value("batch"),
        applicable[0].workload.batch.to_string()
    );
    assert_eq!(
        page.value("seq-len"),
        applicable[0].workload.seq_len.to_string()
    );
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
            .starts_with("load|forward, step 1|backward, step 1|optimizer, step 1|forward, step 2"),
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
