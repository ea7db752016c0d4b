//! Runtime profiles: importing one, its names shown as text, and the profile registry.

use crate::{
    injected, peak_total, pick_file, settle, sleep, upload_profile, wait_until, window, Page,
    REGISTRY_URL,
};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};

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

/// The committed H200 profile named `name`, with a CUDA context of
/// `context_bytes`.
fn registry_profile(name: &str, context_bytes: u64) -> String {
    let mut p: serde_json::Value = serde_json::from_str(include_str!(
        "../../../calibration/profiles/h200-2026-11-30.json"
    ))
    .expect("the committed profile is JSON");
    p["name"] = name.into();
    p["runtime"]["cuda_context_bytes"] = context_bytes.into();
    p["coefficients"]["cuda_context_bytes"]["value"] = context_bytes.into();
    p.to_string()
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

    // The registry's copy of a file the page bundles (the H100's).
    let h100_file = include_str!("../../../calibration/profiles/h100-2026-12-07.json");
    let h100_number = upload_profile(base, h100_file).await;
    let h100: serde_json::Value = serde_json::from_str(h100_file).expect("JSON");
    let h100_card = headroom_web::registry::card_for(
        h100["runtime"]["gpu"].as_str().expect("a GPU name"),
        h100["runtime"]["gpu_total_bytes"]
            .as_u64()
            .expect("its memory"),
    )
    .expect("a catalog card");

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
    // The marks say what the estimates use: the built-in profile is the
    // H200's; the H100's profile is in the registry, not applied.
    assert_eq!(page.text("fit-h200-registry"), "measured");
    page.choose("registry-gpu", "");
    settle().await;
    let h100_mark = format!("fit-{}-registry", h100_card.id);
    wait_until("the H100's mark", || page.find(&h100_mark).is_some()).await;
    assert_eq!(page.text(&h100_mark), "profile in the registry");
    // ... and offered once: the page bundles that file.
    let copy = format!("#profile option[value='registry-{h100_number}']");
    assert!(
        page.root.query_selector(&copy).unwrap().is_none(),
        "the bundled H100 file offered twice"
    );
    page.choose("registry-gpu", "h200");
    settle().await;
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
