//! The page's layout: phone width, the dark scheme and index.html's loading frame.

use crate::{settle, wait_until, window, Page};
use headroom_web::app::App;
use leptos::mount::mount_to;
use wasm_bindgen::JsCast;
use wasm_bindgen_test::{console_log, wasm_bindgen_test};
use web_sys::{Element, HtmlElement};

/// The page's stylesheet, with the dark scheme's media query made to
/// match when `dark`.
fn stylesheet(dark: bool) -> String {
    let css = include_str!("../../style.css");
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

/// index.html's loading frame (title, one line, "Loading the calculator")
/// shows until the calculator's `.page` is in the body, then style.css
/// hides it.
#[wasm_bindgen_test]
async fn the_loading_frame_is_hidden_once_the_calculator_mounts() {
    let document = window().document().expect("a document");
    let style = document.create_element("style").expect("a style element");
    style.set_text_content(Some(include_str!("../../style.css")));
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
