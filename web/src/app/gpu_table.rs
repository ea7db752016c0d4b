//! The GPU table: which GPUs fit (the likely range's high end, plus the
//! user's margin, within the card), as the command line's `gpus` decides.

use super::context::use_page;
use super::fields::{number_field, parse_u32};
use crate::defaults::MAX_MARGIN_PCT;
use crate::format;
use crate::vocab::Choice;
use headroom_core::search::GPU_COUNTS;
use leptos::prelude::*;

/// Per GPU: the longest length, the largest batch, jobs per card and the
/// reservation, with the user's margin on top of the likely range.
#[component]
pub fn FitPanel() -> impl IntoView {
    let page = use_page();
    // The strategy columns of the table on hand (a newer one may add or
    // drop some when it lands).
    let strategies = move || {
        page.fit.with(|rows| {
            rows.as_ref()
                .and_then(|r| r.first())
                .map(|r| r.fewest.iter().map(|(s, _)| *s).collect::<Vec<_>>())
                .unwrap_or_default()
        })
    };
    // The searched columns are for the job as set: on several GPUs, say so.
    let chosen = move || {
        page.state.with(|s| {
            let p = &s.workload.parallel;
            if p.is_single() {
                String::new()
            } else {
                format!(" ({} × {})", p.strategy.label(), p.world_size)
            }
        })
    };
    view! {
        <div class="panel fit">
            <h2>"Which GPUs fit"</h2>
            {number_field("margin", "Extra margin (%)", 0, MAX_MARGIN_PCT as u64,
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
                        <th scope="col">{move || format!("Longest {}{}", page.state.with(|s| if s.vision() { "image" } else { "sequence" }), chosen())}</th>
                        <th scope="col">{move || format!("Largest batch{}", chosen())}</th>
                        <th scope="col">"Jobs per card"</th>
                        <th scope="col">"Reserve per job"</th>
                        {move || strategies().into_iter().map(|st| view! {
                            <th scope="col" data-testid=format!("fewest-{}", st.key())>{format!("Fewest cards: {}", st.label())}</th>
                        }).collect_view()}
                    </tr>
                </thead>
                <tbody>
                    {move || match page.fit.get() {
                        None => view! { <tr><td colspan=6 + strategies().len()>"computing…"</td></tr> }.into_any(),
                        Some(rows) => rows.into_iter().map(|r| {
                            let id = r.gpu.id;
                            let opt = move |v: Result<Option<u32>, String>| match v {
                                Ok(None) => crate::advice::panel::advise_link(id).into_any(),
                                Ok(Some(n)) => format::int(n as u64).into_any(),
                                Err(e) => format!("n/a ({})", format::shown(&e, 600)).into_any(),
                            };
                            let fits = r.jobs.unwrap_or(0) > 0;
                            view! {
                                <tr data-testid=format!("fit-{}", r.gpu.id) class:nofit=!fits>
                                    <th scope="row">{r.gpu.name}{crate::registry::panel::card_mark(page, r.gpu.id)}</th>
                                    <td>{format::bytes(headroom_core::Bytes(r.gpu.usable_bytes))}</td>
                                    <td data-testid=format!("fit-{}-length", r.gpu.id)>{opt(r.max_length)}</td>
                                    <td data-testid=format!("fit-{}-batch", r.gpu.id)>{opt(r.max_batch)}</td>
                                    <td data-testid=format!("fit-{}-jobs", r.gpu.id)>{match r.jobs { Some(0) => crate::advice::panel::advise_link(id).into_any(), Some(j) => jobs_text(j, r.releasing_cache_at).into_any(), None => "n/a".into_any() }}</td>
                                    <td data-testid=format!("fit-{}-reserve", r.gpu.id)>{r.reservation.map_or("n/a".into(), format::mib)}</td>
                                    {r.fewest.into_iter().map(|(st, n)| {
                                        let (text, title) = match n {
                                            Ok(Some(n)) => (n.to_string(), None),
                                            Ok(None) => ("—".to_string(), Some(format!("not on up to {} cards", GPU_COUNTS[GPU_COUNTS.len() - 1]))),
                                            Err(e) => ("n/a".to_string(), Some(format::shown(&e, 600))),
                                        };
                                        view! { <td data-testid=format!("fit-{}-fewest-{}", r.gpu.id, st.key()) title=title>{text}</td> }
                                    }).collect_view()}
                                </tr>
                            }
                        }).collect_view().into_any(),
                    }}
                </tbody>
            </table>
            </div>
            <crate::advice::panel::AdvicePanel/>
            <p class="hint">
                {move || format!(
                    "A card fits when the estimate's likely range (the errors measured for such jobs; wider on cards whose overheads were not measured) plus {}% stays within it; a scheduler should request the reservation per job (the range's high end plus {}%, whole MiB).{} Runtime figures: {}.",
                    page.state.with(|s| s.margin_pct), page.state.with(|s| s.margin_pct),
                    if strategies().is_empty() { "" } else { " Fewest cards: the fewest of that card (1, 2, 4, 8, then whole nodes up to 256) whose per-rank range, at this per-GPU batch, fits the same way (1 where the job fits alone); — where none does." },
                    page.profile.with(|p| format::shown(&p.name, 80))
                )}
            </p>
        </div>
    }
}

/// A row's jobs; where the job fits only by PyTorch freeing its cache at
/// the card's end, its peak there (the row then reserves the whole card).
fn jobs_text(jobs: u64, releasing_cache_at: Option<u64>) -> String {
    match releasing_cache_at {
        Some(on_card) => format!(
            "{jobs}: {} here, freeing cache at the card's end",
            format::bytes(headroom_core::Bytes(on_card))
        ),
        None => jobs.to_string(),
    }
}
