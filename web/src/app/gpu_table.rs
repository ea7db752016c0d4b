//! The GPU table: which GPUs fit, with the fragmentation margin.

use super::context::use_page;
use super::fields::{number_field, parse_u32};
use crate::defaults::MAX_MARGIN_PCT;
use crate::format;
use leptos::prelude::*;

/// Per GPU: the longest length, the largest batch, jobs per card and the
/// reservation, with the fragmentation margin.
#[component]
pub fn FitPanel() -> impl IntoView {
    let page = use_page();
    view! {
        <div class="panel fit">
            <h2>"Which GPUs fit"</h2>
            {number_field("margin", "Fragmentation margin (%)", 0, MAX_MARGIN_PCT as u64,
                move || page.state.with(|s| s.margin_pct.to_string()),
                move |t| {
                    let v = parse_u32("margin", t, 0, MAX_MARGIN_PCT as u64)?;
                    page.update(|s| s.margin_pct = v);
                    Ok(())
                })}
            <div class="table-wrap">
            <table data-testid="gpu-table" aria-busy=move || page.fit_pending.get().to_string() class:stale=move || page.fit_pending.get()>
                <thead>
                    <tr>
                        <th scope="col">"GPU"</th>
                        <th scope="col">"Usable"</th>
                        <th scope="col">{move || format!("Longest {}", page.state.with(|s| if s.vision() { "image" } else { "sequence" }))}</th>
                        <th scope="col">"Largest batch"</th>
                        <th scope="col">"Jobs per card"</th>
                        <th scope="col">"Reserve per job"</th>
                    </tr>
                </thead>
                <tbody>
                    {move || match page.fit.get() {
                        None => view! { <tr><td colspan="6">"computing…"</td></tr> }.into_any(),
                        Some(rows) => rows.into_iter().map(|r| {
                            let opt = |v: Result<Option<u32>, String>| match v {
                                Ok(Some(n)) => format::int(n as u64),
                                Ok(None) => "does not fit".into(),
                                Err(e) => format!("n/a ({e})"),
                            };
                            let fits = r.jobs.unwrap_or(0) > 0;
                            view! {
                                <tr data-testid=format!("fit-{}", r.gpu.id) class:nofit=!fits>
                                    <th scope="row">{r.gpu.name}</th>
                                    <td>{format::bytes(headroom_core::Bytes(r.gpu.usable_bytes))}</td>
                                    <td data-testid=format!("fit-{}-length", r.gpu.id)>{opt(r.max_length)}</td>
                                    <td data-testid=format!("fit-{}-batch", r.gpu.id)>{opt(r.max_batch)}</td>
                                    <td data-testid=format!("fit-{}-jobs", r.gpu.id)>{r.jobs.map_or("n/a".into(), |j| j.to_string())}</td>
                                    <td data-testid=format!("fit-{}-reserve", r.gpu.id)>{r.reservation.map_or("n/a".into(), format::mib)}</td>
                                </tr>
                            }
                        }).collect_view().into_any(),
                    }}
                </tbody>
            </table>
            </div>
            <p class="hint">
                {move || format!(
                    "Longest length and largest batch leave the {}% margin free; a scheduler should request the reservation per job (the peak plus {}%, whole MiB). Runtime figures: {}.",
                    page.state.with(|s| s.margin_pct), page.state.with(|s| s.margin_pct), page.profile.with(|p| p.name.clone())
                )}
            </p>
        </div>
    }
}
