//! The breakdown panel: the estimate at the chosen length.

use super::context::use_page;
use super::fields::said;
use crate::chart;
use crate::defaults;
use crate::format;
use leptos::prelude::*;

/// The peak at the chosen length, its op and its components.
#[component]
pub fn BreakdownPanel() -> impl IntoView {
    let page = use_page();
    view! {
        <div class="panel breakdown" data-testid="breakdown">
            <h2>"Breakdown at the chosen length"</h2>
            {move || {
                let (length, label, per_rank) = page.state.with(|s| {
                    (s.length(), defaults::length_label(&s.model.arch), crate::vocab::per_rank_label(&s.workload.parallel))
                });
                let point = if page.point_pending.get() {
                    Err(None)
                } else {
                    page.point.get().map_err(Some)
                };
                match point {
                    // The core's error, or a newer estimate still coming.
                    Err(e) => {
                        let (class, role, id) = match e {
                            Some(_) => ("error", "alert", "estimate-error"),
                            None => ("note", "status", "point-pending"),
                        };
                        // The core's message may quote a value from a link.
                        let text = e.map_or_else(|| "Computing the estimate at this length…".to_string(), |e| format::shown(&e, 600));
                        view! { <p class=class role=role data-testid=id>{said(text)}</p> }.into_any()
                    }
                    Ok(e) => {
                        let total = e.driver_peak;
                        let parts: Vec<_> = e.breakdown.iter().filter(|s| s.bytes.0 > 0).copied().collect();
                        view! {
                            <p class="peak">
                                "Peak "<strong data-testid="peak-total">{format::bytes(total)}</strong>
                                {format!(" at {} {}", label, format::int(length as u64))}
                                "; tensors at their most during "<code data-testid="peak-op">{e.peak_op.clone()}</code>
                                {per_rank.map(|p| view! { " ("<span data-testid="per-rank">{p}</span>")" })}
                            </p>
                            <div class="bar" role="img" aria-label="Share of each component at the peak">
                                {parts.iter().map(|s| {
                                    let pct = if total.0 > 0 { s.bytes.0 as f64 * 100.0 / total.0 as f64 } else { 0.0 };
                                    view! { <span title=format!("{}: {}", s.component.label(), format::bytes(s.bytes))
                                        style=format!("width:{pct:.3}%;background:{}", chart::css_color(s.component))></span> }
                                }).collect_view()}
                            </div>
                            <table data-testid="breakdown-table">
                                <thead><tr><th scope="col">"Component"</th><th scope="col">"GB"</th><th scope="col">"Share"</th></tr></thead>
                                <tbody>
                                    {parts.iter().map(|s| view! {
                                        <tr data-testid=format!("row-{}", s.component.key())>
                                            <th scope="row"><span class="swatch" style=format!("background:{}", chart::css_color(s.component))></span>{s.component.label()}</th>
                                            <td>{format::bytes(s.bytes)}</td>
                                            <td>{format::percent(s.bytes, total)}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                                <tfoot>
                                    <tr><th scope="row">"Driver-level peak (nvidia-smi)"</th><td>{format::bytes(total)}</td><td>"100%"</td></tr>
                                    <tr><th scope="row">"torch max reserved"</th><td>{format::bytes(e.reserved_peak)}</td><td></td></tr>
                                    <tr><th scope="row">"torch max allocated"</th><td>{format::bytes(e.allocated_peak)}</td><td></td></tr>
                                    <tr><th scope="row">"Parameters"</th><td colspan="2">{format::params(e.params)}</td></tr>
                                </tfoot>
                            </table>
                        }.into_any()
                    }
                }
            }}
        </div>
    }
}
