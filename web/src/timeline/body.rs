//! Memory over the job at the chosen length: allocated and reserved bytes
//! over the job's allocations and frees (the core's timeline), its phases
//! shaded and labelled, the peak marked, what is live at the peak, and PNG
//! and CSV exports. It is one more replay of the job, with a timeline.

use crate::chart::panel::{download, save_png};
use crate::chart::{self, Theme};
use crate::format;
use crate::protocol::Inputs;
use crate::timeline::{op_label, JobTimeline};
use headroom_core::Bytes;
use leptos::html;
use leptos::prelude::*;
use plotters::style::RGBColor;
use std::sync::Arc;
use std::time::Duration;
use wasm_bindgen::JsCast;
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement};

/// The plot's margins inside the canvas, CSS pixels: left, right, top, bottom.
const MARGINS: (f64, f64, f64, f64) = (52.0, 10.0, 22.0, 26.0);

/// Reserved bytes' line colour.
const RESERVED: &str = "#1f6feb";
/// Allocated bytes' line colour.
const ALLOCATED: &str = "#db6d28";

fn css(c: RGBColor) -> String {
    format!("rgb({},{},{})", c.0, c.1, c.2)
}

/// A phase's shade, from its label.
fn shade(label: &str) -> &'static str {
    match label.split([',', ' ']).next() {
        Some("forward" | "prefill" | "recycle") => "rgba(84,174,255,0.16)",
        Some("backward") => "rgba(240,136,62,0.16)",
        Some("optimizer") => "rgba(191,57,137,0.18)",
        Some("decode") => "rgba(26,127,55,0.16)",
        _ => "rgba(140,149,159,0.16)",
    }
}

/// Where the plot lies in the canvas, to map the pointer back to a point.
#[derive(Clone, Copy, Default)]
struct Frame {
    left: f64,
    width: f64,
    events: u64,
}

/// Draws `t` on `ctx` (`w` × `h` CSS pixels, scaled by `dpr`).
fn draw(ctx: &CanvasRenderingContext2d, w: f64, h: f64, dpr: f64, t: &JobTimeline, theme: Theme) {
    let (ml, mr, mt, mb) = MARGINS;
    let (pw, ph) = (w - ml - mr, h - mt - mb);
    let _ = ctx.set_transform(dpr, 0.0, 0.0, dpr, 0.0, 0.0);
    ctx.set_fill_style_str(&css(theme.background()));
    ctx.fill_rect(0.0, 0.0, w, h);
    let events = t.events.max(1) as f64;
    let x = |event: f64| ml + event / events * pw;
    let top = t
        .points
        .iter()
        .map(|p| p.reserved)
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.08;
    let y = |bytes: u64| mt + ph - bytes as f64 / top * ph;
    let fg = css(theme.foreground());
    ctx.set_font("11px system-ui, sans-serif");
    // Phases.
    for band in t.bands() {
        let (x0, x1) = (x(band.from as f64), x(band.to as f64));
        ctx.set_fill_style_str(shade(&band.label));
        ctx.fill_rect(x0, mt, (x1 - x0).max(0.5), ph);
        if x1 - x0 > 44.0 {
            ctx.set_fill_style_str(&fg);
            let text = if ctx.measure_text(&band.label).map_or(0.0, |m| m.width()) < x1 - x0 - 4.0 {
                band.label.clone()
            } else {
                band.label.split(',').next().unwrap_or_default().to_string()
            };
            let _ = ctx.fill_text(&text, x0 + 2.0, mt - 6.0);
        }
    }
    // Axes and gridlines, in GB.
    ctx.set_stroke_style_str(&css(theme.grid()));
    ctx.set_line_width(1.0);
    for i in 0..=4 {
        let bytes = (top / 1.08 * f64::from(i) / 4.0) as u64;
        let yy = y(bytes);
        ctx.begin_path();
        ctx.move_to(ml, yy);
        ctx.line_to(ml + pw, yy);
        ctx.stroke();
        ctx.set_fill_style_str(&fg);
        let _ = ctx.fill_text(&format::gb(Bytes(bytes).as_gb()), 4.0, yy + 4.0);
    }
    let _ = ctx.fill_text("allocations and frees over the job →", ml, h - 8.0);
    // Reserved, then allocated bytes.
    for (colour, value) in [
        (
            RESERVED,
            (|p: &headroom_core::timeline::TimelinePoint| p.reserved) as fn(&_) -> u64,
        ),
        (ALLOCATED, |p| p.allocated),
    ] {
        ctx.set_stroke_style_str(colour);
        ctx.set_line_width(1.5);
        ctx.begin_path();
        for (i, p) in t.points.iter().enumerate() {
            let (px, py) = (x(p.first_event as f64 + p.events as f64 / 2.0), y(value(p)));
            if i == 0 {
                ctx.move_to(px, py);
            } else {
                ctx.line_to(px, py);
            }
        }
        ctx.stroke();
    }
    // The peak moment: where the tensors took the most memory (the
    // breakdown's moment; reserved memory may grow later).
    if let Some(i) = t.peak_index() {
        let p = &t.points[i];
        let (px, py) = (
            x(p.first_event as f64 + p.events as f64 / 2.0),
            y(p.allocated),
        );
        ctx.set_stroke_style_str(&css(theme.foreground()));
        ctx.begin_path();
        ctx.move_to(px, mt);
        ctx.line_to(px, mt + ph);
        ctx.stroke();
        ctx.set_fill_style_str(&fg);
        ctx.begin_path();
        let _ = ctx.arc(px, py, 4.0, 0.0, std::f64::consts::TAU);
        ctx.fill();
        let label = format!("allocated peak {}", format::bytes(Bytes(p.allocated)));
        let width = ctx.measure_text(&label).map_or(60.0, |m| m.width());
        let lx = if px + 6.0 + width > w {
            px - 6.0 - width
        } else {
            px + 6.0
        };
        let _ = ctx.fill_text(&label, lx, py.max(mt + 12.0) - 6.0);
    }
}

/// The timeline chart of `request`'s job, its table of what is live at the
/// peak, and its exports (files named from `file_stem`).
#[component]
pub fn TimelineBody(
    request: Signal<Result<Inputs, String>>,
    theme: Signal<Theme>,
    file_stem: Signal<String>,
) -> impl IntoView {
    // `None` while it is computed.
    let timeline = RwSignal::new(None::<Result<Arc<JobTimeline>, String>>);
    let runs = StoredValue::new(0u64);
    Effect::new(move |_| {
        let request = request.get();
        runs.update_value(|n| *n += 1);
        let ticket = runs.get_value();
        timeline.set(None);
        let Inputs {
            arch,
            workload: w,
            runtime: rt,
        } = match request {
            Ok(inputs) => inputs,
            Err(e) => return timeline.set(Some(Err(e))),
        };
        if crate::jobs::is_slow(&arch, &w) {
            timeline.set(Some(Err("this job takes too long to replay for the page to trace it: `headroom estimate --timeline FILE.csv` writes its timeline".into())));
            return;
        }
        set_timeout(
            move || {
                if runs.try_get_value() == Some(ticket) {
                    let t = JobTimeline::compute(&arch, &w, &rt).map(Arc::new);
                    timeline.try_set(Some(t));
                }
            },
            Duration::from_millis(20),
        );
    });

    let canvas: NodeRef<html::Canvas> = NodeRef::new();
    let frame = StoredValue::new(Frame::default());
    let hover = RwSignal::new(None::<(f64, usize)>);
    let resize = RwSignal::new(0u32);
    let on_resize = window_event_listener(leptos::ev::resize, move |_| {
        resize.try_update(|n| *n += 1);
    });
    on_cleanup(move || on_resize.remove());
    Effect::new(move |_| {
        resize.track();
        let theme = theme.get();
        let Some(Ok(t)) = timeline.get() else { return };
        let Some(el) = canvas.get() else { return };
        let el: HtmlCanvasElement = el;
        let dpr = window().device_pixel_ratio().max(1.0);
        let (w, h) = (
            el.client_width().max(240) as f64,
            el.client_height().max(160) as f64,
        );
        el.set_width((w * dpr) as u32);
        el.set_height((h * dpr) as u32);
        let Some(ctx) = el
            .get_context("2d")
            .ok()
            .flatten()
            .and_then(|c| c.dyn_into::<CanvasRenderingContext2d>().ok())
        else {
            return;
        };
        draw(&ctx, w, h, dpr, &t, theme);
        frame.set_value(Frame {
            left: MARGINS.0,
            width: w - MARGINS.0 - MARGINS.1,
            events: t.events,
        });
        let phases: Vec<String> = t.bands().into_iter().map(|b| b.label).collect();
        let top = |f: fn(&headroom_core::timeline::TimelinePoint) -> u64| {
            t.points.iter().map(f).max().unwrap_or(0).to_string()
        };
        let _ = el.set_attribute("data-phases", &phases.join("|"));
        let _ = el.set_attribute("data-max-reserved", &top(|p| p.reserved));
        let _ = el.set_attribute("data-max-allocated", &top(|p| p.allocated));
        let _ = el.set_attribute("data-points", &t.points.len().to_string());
    });

    let point_at = move |ev: &web_sys::MouseEvent| -> Option<(f64, usize)> {
        let Some(Ok(t)) = timeline.get_untracked() else {
            return None;
        };
        let f = frame.get_value();
        let x = ev.offset_x() as f64;
        let event = ((x - f.left) / f.width).clamp(0.0, 1.0) * f.events as f64;
        let i = t
            .points
            .iter()
            .position(|p| (p.first_event + p.events) as f64 > event)
            .unwrap_or(t.points.len().saturating_sub(1));
        Some((x, i))
    };
    let tooltip = move || {
        let (x, i) = hover.get()?;
        let Some(Ok(t)) = timeline.get() else {
            return None;
        };
        let p = t.points.get(i)?;
        Some(view! {
            <div class="tooltip" data-testid="timeline-tooltip" style=format!("left: {x:.0}px")>
                <strong>{t.phase_at(p.first_event)}</strong>
                <div>{op_label(&p.op)}</div>
                <div>{format!("reserved {}, allocated {}", format::bytes(Bytes(p.reserved)), format::bytes(Bytes(p.allocated)))}</div>
            </div>
        })
    };
    let export_csv = move |_| {
        if let Some(Ok(t)) = timeline.get_untracked() {
            let name = format!("{}-timeline.csv", file_stem.get_untracked());
            download(&name, "text/csv", &t.csv());
        }
    };
    let export_png = move |_| {
        if let Some(el) = canvas.get_untracked() {
            save_png(&el, &format!("{}-timeline.png", file_stem.get_untracked()));
        }
    };
    let body = move || {
        let result = timeline.get();
        match result {
            None => view! { <p class="hint" role="status" data-testid="timeline-pending">"Replaying the job with its timeline…"</p> }.into_any(),
            Some(Err(e)) => view! { <p class="error" data-testid="timeline-error">{format::shown(&e, 600)}</p> }.into_any(),
            Some(Ok(t)) => {
                let peak = t.peak_index().and_then(|i| t.points.get(i).copied());
                let parts: Vec<_> = t.estimate.breakdown.iter().filter(|s| s.bytes.0 > 0).copied().collect();
                view! {
                    <p class="peak">
                        "Peak reserved "<strong data-testid="timeline-peak">{format::bytes(t.estimate.reserved_peak)}</strong>
                        {peak.map(|p| format!("; allocated at most {} during {} ({})", format::bytes(t.estimate.allocated_peak), op_label(&p.op), t.phase_at(p.first_event)))}
                    </p>
                    <p class="legend">
                        <span class="swatch" style=format!("background:{RESERVED}")></span>"reserved "
                        <span class="swatch" style=format!("background:{ALLOCATED}")></span>"allocated, over "{format::int(t.events)}" allocations and frees"
                    </p>
                    <table data-testid="timeline-live">
                        <caption>"Live when the tensors took the most memory; the slack is the rest of the reserved peak, and the driver-level peak adds what lives outside the allocator"</caption>
                        <thead><tr><th scope="col">"Component"</th><th scope="col">"GB"</th></tr></thead>
                        <tbody>
                            {parts.into_iter().map(|s| view! {
                                <tr><th scope="row"><span class="swatch" style=format!("background:{}", chart::css_color(s.component))></span>{s.component.label()}</th><td>{format::bytes(s.bytes)}</td></tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                }.into_any()
            }
        }
    };

    view! {
        <div class="canvas-wrap" on:mouseleave=move |_| hover.set(None)>
            <canvas node_ref=canvas data-testid="timeline" role="img"
                aria-label="Allocated and reserved memory over the job's allocations and frees, by phase"
                on:mousemove=move |ev| hover.set(point_at(&ev))></canvas>
            {tooltip}
        </div>
        {body}
        <div class="exports" role="group" aria-label="Export the timeline">
            <button type="button" data-testid="timeline-png" on:click=export_png>"Timeline as PNG"</button>
            <button type="button" data-testid="timeline-csv" on:click=export_csv>"Timeline as CSV"</button>
        </div>
    }
}
