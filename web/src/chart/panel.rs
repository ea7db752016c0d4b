//! The chart panel: the curve, its settings (axis, range, GPU lines), the
//! tooltip, and the exports (PNG, CSV, JSON).

use crate::app::context::{page_url, use_page};
use crate::app::fields::{checkbox, number_field, parse_u32, said};
use crate::app::perf;
use crate::chart::{self, ChartSpec, Layout};
use crate::defaults;
use crate::export;
use crate::format;
use crate::state::AppState;
use headroom_core::estimate::Component;
use headroom_core::gpus::CATALOG;
use leptos::html;
use leptos::prelude::*;
use plotters::prelude::IntoDrawingArea;
use plotters_canvas::CanvasBackend;
use std::cell::RefCell;
use wasm_bindgen::JsCast;
use web_sys::HtmlCanvasElement;

thread_local! {
    static LAST_EXPORT: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// The last file exported (name and text; PNG exports hold the data URL).
pub fn last_export() -> Option<(String, String)> {
    LAST_EXPORT.with(|e| e.borrow().clone())
}

/// Saves `text` as a file named `name` (and keeps it for the tests).
pub(crate) fn download(name: &str, mime: &str, text: &str) {
    LAST_EXPORT.with(|e| *e.borrow_mut() = Some((name.to_string(), text.to_string())));
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
    let bag = web_sys::BlobPropertyBag::new();
    bag.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &bag) else {
        return;
    };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else {
        return;
    };
    click_link(name, &url);
    let _ = web_sys::Url::revoke_object_url(&url);
}

/// Saves what `canvas` shows as a PNG file named `name` (and keeps its
/// data URL for the tests).
pub(crate) fn save_png(canvas: &HtmlCanvasElement, name: &str) {
    if let Ok(url) = canvas.to_data_url() {
        LAST_EXPORT.with(|e| *e.borrow_mut() = Some((name.to_string(), url.clone())));
        click_link(name, &url);
    }
}

/// Follows `href` as a download named `name`.
fn click_link(name: &str, href: &str) {
    if let Ok(a) = document().create_element("a") {
        let a: web_sys::HtmlAnchorElement = a.unchecked_into();
        a.set_href(href);
        a.set_download(name);
        a.click();
    }
}

/// The exported files' name: `headroom-` and the model id.
pub(crate) fn file_stem(state: &AppState) -> String {
    let id = if state.model.id == "custom" {
        "custom"
    } else {
        &state.model.id
    };
    format!("headroom-{id}")
}

/// Peak VRAM against length, stacked by component, with GPU lines.
#[component]
pub fn ChartPanel() -> impl IntoView {
    let page = use_page();
    let canvas: NodeRef<html::Canvas> = NodeRef::new();
    let layout = StoredValue::new(Layout::default());
    let resize = RwSignal::new(0u32);
    let hover = RwSignal::new(None::<(f64, usize)>);
    let off_scale = RwSignal::new(Vec::<(String, f64)>::new());
    let _ = window_event_listener(leptos::ev::resize, move |_| resize.update(|n| *n += 1));

    Effect::new(move |_| {
        resize.track();
        let Some(el) = canvas.get() else { return };
        let el: HtmlCanvasElement = el;
        let dpr = window().device_pixel_ratio().max(1.0);
        let (w, h) = (
            el.client_width().max(300) as f64,
            el.client_height().max(200) as f64,
        );
        let (pw, ph) = ((w * dpr) as u32, (h * dpr) as u32);
        if el.width() != pw || el.height() != ph {
            el.set_width(pw);
            el.set_height(ph);
        }
        // A stale curve on new axes would mislead: wait for the new one.
        if !page.curve_is_current() {
            return;
        }
        let theme = page.theme.get().resolve();
        let (from, to, log_x, x_label, length, gpu_ids, per_gpu) = page.state.with(|s| {
            (
                s.view.from,
                s.view.to,
                s.view.log_x,
                defaults::length_label(&s.model.arch),
                s.length(),
                s.gpus.clone(),
                s.workload.parallel.world_size > 1,
            )
        });
        let gpu_lines: Vec<(String, f64)> = CATALOG
            .iter()
            .filter(|g| gpu_ids.iter().any(|id| id == g.id))
            .map(|g| {
                (
                    g.name.to_string(),
                    headroom_core::Bytes(g.usable_bytes).as_gb(),
                )
            })
            .collect();
        let measured: Vec<(u32, f64)> = page
            .measured
            .get()
            .into_iter()
            .map(|(l, b)| (l, headroom_core::Bytes(b).as_gb()))
            .collect();
        let total = page
            .point
            .with(|p| p.as_ref().ok().map(|e| e.driver_peak.as_gb()));
        let likely = page.likely.get();
        let drawing = perf::now();
        let result = page.curve.with(|curve| {
            page.bands.with(|bands| {
                let spec = ChartSpec {
                    curve,
                    bands,
                    likely: &likely,
                    from,
                    to,
                    log_x,
                    x_label,
                    y_label: if per_gpu {
                        chart::Y_LABEL_PER_GPU
                    } else {
                        chart::Y_LABEL
                    },
                    marker: Some((length, total)),
                    gpu_lines: &gpu_lines,
                    measured: &measured,
                    theme,
                    scale: dpr,
                };
                let Some(backend) = CanvasBackend::with_canvas_object(el.clone()) else {
                    return Err("no 2D canvas context".to_string());
                };
                chart::draw(&backend.into_drawing_area(), &spec)
            })
        });
        perf::draw_took(perf::now() - drawing);
        match result {
            Ok(l) => {
                off_scale.set(l.off_scale.clone());
                layout.set_value(l);
            }
            Err(e) => leptos::logging::warn!("chart: {e}"),
        }
        let complete = !page.curve_refining.get();
        perf::drawn(complete);
        let _ = el.set_attribute("data-complete", &complete.to_string());
        let _ = el.set_attribute("data-draws", &perf::draws().to_string());
        let _ = el.set_attribute("data-measured", &measured.len().to_string());
        let _ = el.set_attribute("data-workers", &crate::workers::ready().len().to_string());
        let _ = el.set_attribute(
            "data-points",
            &page.curve.with(|c| c.lengths.len()).to_string(),
        );
    });

    let index_at = move |ev: &web_sys::MouseEvent| -> Option<(f64, usize)> {
        let dpr = window().device_pixel_ratio().max(1.0);
        let x = ev.offset_x() as f64;
        let l = layout.with_value(|l| l.length_at(x * dpr))?;
        let log_x = page.state.with_untracked(|s| s.view.log_x);
        let i = page.curve.with_untracked(|c| c.nearest(l, log_x))?;
        Some((x, i))
    };
    let tooltip = move || {
        let (x, i) = hover.get()?;
        let (length, e) = page
            .curve
            .with(|c| Some((*c.lengths.get(i)?, c.estimates.get(i)?.clone())))?;
        let mut parts: Vec<(Component, headroom_core::Bytes)> = e
            .breakdown
            .iter()
            .filter(|s| s.bytes.0 > 0)
            .map(|s| (s.component, s.bytes))
            .collect();
        crate::sort::by_key(&mut parts, |p| (!p.1 .0, 0));
        parts.truncate(4);
        Some(view! {
            <div class="tooltip" data-testid="tooltip" style=format!("left: {x:.0}px")>
                <strong>{format!("{} → {}", format::int(length as u64), format::bytes(e.driver_peak))}</strong>
                <ul>{parts.into_iter().map(|(c, b)| view! { <li><span class="swatch" style=format!("background:{}", chart::css_color(c))></span>{format!("{}: {}", c.label(), format::bytes(b))}</li> }).collect_view()}</ul>
            </div>
        })
    };
    let caption = move || {
        let mut lines = Vec::new();
        let n_points = page.curve.with(|c| c.lengths.len() + c.failed);
        if let Some((len, msg)) = page.curve.with(|c| c.error.clone()) {
            let failed = page.curve.with(|c| c.failed);
            lines.push(format!(
                "The core could not estimate {failed} of {n_points} lengths (first at {}): {}",
                format::int(len as u64),
                format::shown(&msg, 600)
            ));
        }
        (!lines.is_empty()).then(|| view! { <p class="error" role="alert" data-testid="curve-error">{said(lines.join(" "))}</p> })
    };

    let export_png = move |_| {
        if let Some(el) = canvas.get_untracked() {
            save_png(
                &el,
                &format!("{}.png", page.state.with_untracked(file_stem)),
            );
        }
    };
    let export_csv = move |_| {
        let vision = page.state.with_untracked(|s| s.vision());
        let csv = page.curve.with_untracked(|c| export::curve_csv(c, vision));
        download(
            &format!("{}-curve.csv", page.state.with_untracked(file_stem)),
            "text/csv",
            &csv,
        );
    };
    let export_json = move |_| {
        // A newer estimate is still coming: its breakdown says so.
        if page.point_pending.get_untracked() {
            return;
        }
        let link = page_url(&page.state.with_untracked(AppState::to_query));
        let rt = page.runtime.get_untracked();
        let text = page.point.with_untracked(|p| {
            page.state.with_untracked(|s| {
                export::estimate_json(s, &rt, p.as_ref().map_err(String::as_str), &link)
            })
        });
        download(
            &format!("{}-estimate.json", page.state.with_untracked(file_stem)),
            "application/json",
            &text,
        );
    };

    let range_field = move |id: &'static str, label: &'static str, is_from: bool| {
        number_field(
            id,
            label,
            1,
            headroom_core::workload::MAX_SEQ_LEN,
            move || {
                page.state
                    .with(|s| if is_from { s.view.from } else { s.view.to }.to_string())
            },
            move |t| {
                let v = parse_u32(
                    if is_from { "from" } else { "to" },
                    t,
                    1,
                    headroom_core::workload::MAX_SEQ_LEN,
                )?;
                let (from, to) = page.state.with_untracked(|s| {
                    if is_from {
                        (v, s.view.to)
                    } else {
                        (s.view.from, v)
                    }
                });
                if from >= to {
                    return Err(format!(
                        "`{}`: the range must run upwards ({from} to {to})",
                        if is_from { "from" } else { "to" }
                    ));
                }
                page.update(|s| {
                    s.view.from = from;
                    s.view.to = to;
                });
                Ok(())
            },
        )
    };

    view! {
        <div class="panel chart-panel">
            <div class="toolbar" role="group" aria-label="Chart settings">
                {checkbox("log-x", "Log length axis",
                    Box::new(move || page.state.with(|s| s.view.log_x)),
                    Box::new(move |on| page.update(|s| s.view.log_x = on)))}
                {range_field("range-from", "From", true)}
                {range_field("range-to", "To", false)}
                <details class="gpus" data-testid="gpu-lines">
                    <summary>{move || format!("GPU lines ({} of {})", page.state.with(|s| s.gpus.len()), CATALOG.len())}</summary>
                    <div class="gpu-list">
                    {CATALOG.iter().map(|g| {
                        let id = g.id;
                        let input_id = format!("gpu-{id}");
                        view! {
                            <span class="check">
                                <input id=input_id.clone() data-testid=input_id.clone() type="checkbox"
                                    prop:checked=move || page.state.with(|s| s.gpus.iter().any(|x| x == id))
                                    on:change=move |ev| {
                                        let on = event_target_checked(&ev);
                                        page.update(|s| {
                                            s.gpus.retain(|x| x != id);
                                            if on {
                                                s.gpus = CATALOG.iter().map(|g| g.id.to_string()).filter(|x| x == id || s.gpus.contains(x)).collect();
                                            }
                                        });
                                    }/>
                                <label for=input_id>{g.name}</label>
                            </span>
                        }
                    }).collect_view()}
                    </div>
                </details>
            </div>
            <div class="canvas-wrap" on:mouseleave=move |_| hover.set(None)>
                <canvas
                    node_ref=canvas
                    data-testid="chart"
                    role="img"
                    aria-label=move || page.state.with(|s| format!("Peak VRAM{} of {} against {}", if s.workload.parallel.world_size > 1 { " per GPU" } else { "" }, format::shown(&s.model.name, crate::app::model::NAME_CHARS), defaults::length_label(&s.model.arch)))
                    on:mousemove=move |ev| hover.set(index_at(&ev))
                    on:click=move |ev| {
                        if let Some((_, i)) = index_at(&ev) {
                            if let Some(len) = page.curve.with_untracked(|c| c.lengths.get(i).copied()) {
                                let vision = page.state.with_untracked(|s| s.vision());
                                let _ = page.apply(|w| *w = w.with_length(vision, len));
                            }
                        }
                        hover.set(index_at(&ev));
                    }
                ></canvas>
                {tooltip}
            </div>
            {move || page.curve_progress.get().map(|done| view! {
                <p class="hint" role="status" data-testid="curve-progress">
                    {format!("Computing the curve: {:.0}%…", done * 100.0)}
                </p>
            })}
            {caption}
            // Always there (empty when no line is off the chart), so that
            // the page below does not move as an input changes the scale.
            <p class="hint off-scale" data-testid="off-scale">
                {move || off_scale.with(|off| (!off.is_empty()).then(|| {
                    format!("Above the chart: {}", off.iter().map(|(n, g)| format!("{n} ({} usable)", format::gb(*g))).collect::<Vec<_>>().join(", "))
                }))}
            </p>
            <div class="exports" role="group" aria-label="Export">
                <button type="button" data-testid="export-png" on:click=export_png>"Chart as PNG"</button>
                <button type="button" data-testid="export-csv" on:click=export_csv>"Curve as CSV"</button>
                <button type="button" data-testid="export-json" on:click=export_json>"Estimate as JSON"</button>
            </div>
        </div>
    }
}
