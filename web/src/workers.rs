//! Worker threads for the main curve (wasm32 only).
//!
//! A curve is hundreds of independent replays. The page starts one module
//! worker per spare core (`navigator.hardwareConcurrency - 1`, at most
//! [`MAX_WORKERS`]), each instantiating this same wasm module, and splits a
//! curve's lengths between them and the page's own thread
//! ([`crate::curve::share`]). A worker gets a [`crate::protocol::Request`]
//! and answers with text ([`crate::protocol::answer`]); the estimates are
//! the ones the page's thread would compute (tested natively for every
//! preset, and in the browser). A slow job's estimate at the chosen
//! length and its GPU table each go to a worker of their own
//! ([`estimate_one`], [`fit_rows`]), and its curve to workers of its own,
//! one per core, a few lengths per request ([`crate::jobs::is_slow`]: a
//! long generation, a custom model of a thousand layers), so that the
//! page's thread never replays one of its points. Whatever goes wrong with
//! a worker (no module workers, a failed load, a trap, a bad or missing
//! answer), its share is computed on the page's thread instead, so the
//! curve never depends on workers being there; but a slow curve's lengths
//! that its workers could not compute are reported as not computed (each
//! would hold the page's thread for long), and only where no worker starts
//! at all does the page's thread compute a slow curve.
//!
//! This file splits a curve between the workers and the page's thread;
//! `pool` keeps the curve's workers, `helper` starts a worker of its own
//! for one job.

mod helper;
mod pool;

pub use helper::{estimate_one, fit_rows};
pub(crate) use pool::module_urls;
pub use pool::{cancel_busy, ready, start};

use crate::curve::{self, weighted_shares, CurveData, PointResult};
use crate::protocol::{self, read_estimates, Inputs, Request};
use headroom_core::arch::Architecture;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use helper::Helper;
use js_sys::Promise;
use pool::{replacements_loading, request, watch, ANSWERED_AT, POOL};
use wasm_bindgen::prelude::*;

/// Most workers the page starts.
pub const MAX_WORKERS: usize = 7;

/// A worker that has not answered a request this long after the page's
/// thread finished its own share (or twice the time that share took, if
/// longer) is stopped and its share computed on the page's thread (a
/// 256-point share usually takes well under a second).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The page's thread hands control back to the browser (input, drawing)
/// after computing for this long, so that a curve being refined never
/// delays an input's answer by more than this (and a slow one, a
/// generation of thousands of tokens, never freezes the page).
const YIELD_AFTER_MS: f64 = 16.0;

/// The page's thread draws a curve's first points after computing them
/// for about this long (the chosen length's and the first of its share's,
/// spread over the range), in the input's own task ([`begin`]), then
/// refines the curve with the rest ([`finish`]).
pub const FIRST_DRAW_MS: f64 = 5.0;

/// A curve's progress is shown once its computation has taken this long.
const SHOW_PROGRESS_AFTER_MS: f64 = 250.0;

/// What a worker thread runs for each request (exported to its JS).
#[wasm_bindgen]
pub fn headroom_answer(request: &str) -> String {
    protocol::answer(request)
}

thread_local! {
    static FALLBACKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static REPLACED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static ANSWERED_ONE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static STOPPED_ONE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The page's thread's share of the next curve against one worker's
    /// ([`curve::next_page_weight`]).
    static PAGE_WEIGHT: std::cell::Cell<f64> = const { std::cell::Cell::new(1.0) };
}

/// Single-estimate workers stopped unheard because a newer input
/// superseded their estimate (for the browser tests).
pub fn stopped_one() -> u32 {
    STOPPED_ONE.with(std::cell::Cell::get)
}

/// Single estimates ([`estimate_one`]) a worker answered since the page
/// loaded (for the browser tests).
pub fn answered_one() -> u32 {
    ANSWERED_ONE.with(std::cell::Cell::get)
}

/// Curve workers stopped because their curve was superseded since the page
/// loaded: pool workers replaced by [`cancel_busy`], a slow curve's own
/// workers (for the browser tests).
pub fn replaced() -> u32 {
    REPLACED.with(std::cell::Cell::get)
}

/// Shares computed on the page's thread because a worker's answer was
/// missing or unreadable (for the browser tests: none on a healthy page).
pub fn fallbacks() -> u32 {
    FALLBACKS.with(std::cell::Cell::get)
}

/// `performance.now()`, in ms.
fn now() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Lets the browser run its queued work (input events, rendering) before
/// this task goes on: a message to itself, which (unlike a timer nested in
/// timers) is not delayed by 4 ms.
async fn yield_to_browser() {
    let promise = Promise::new(
        &mut |resolve, _reject| match web_sys::MessageChannel::new() {
            Ok(channel) => {
                channel.port1().set_onmessage(Some(&resolve));
                if channel.port2().post_message(&JsValue::NULL).is_err() {
                    let _ = resolve.call0(&JsValue::NULL);
                }
            }
            Err(_) => {
                let _ = resolve.call0(&JsValue::NULL);
            }
        },
    );
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// Resumes after `ms` milliseconds (a timer task).
async fn sleep_ms(ms: i32) {
    let promise = Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// The points of `lengths` in order, on this thread: at least one, and no
/// more once `budget_ms` has passed (the rest is left for later).
fn points_for(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
    budget_ms: f64,
) -> Vec<PointResult> {
    let started = now();
    let mut replay = curve::take_replay(runtime);
    let mut out = Vec::new();
    for &length in lengths {
        if !out.is_empty() && now() - started > budget_ms {
            break;
        }
        out.push(curve::estimate_point(
            &mut replay,
            arch,
            workload,
            runtime,
            length,
        ));
    }
    curve::put_back_replay(replay);
    out
}

/// This thread's share of a curve (or the rest of it), computed in slices
/// of [`YIELD_AFTER_MS`], yielding to the browser between them (reporting
/// its progress once that has taken [`SHOW_PROGRESS_AFTER_MS`]); it stops
/// (`None`) once the curve is no longer `wanted`.
async fn own_share(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
    wanted: &impl Fn() -> bool,
    progress: &impl Fn(Option<f64>),
) -> Option<Vec<PointResult>> {
    let started = now();
    let mut out = Vec::with_capacity(lengths.len());
    while out.len() < lengths.len() {
        if !out.is_empty() {
            if now() - started > SHOW_PROGRESS_AFTER_MS {
                progress(Some(out.len() as f64 / lengths.len() as f64));
            }
            yield_to_browser().await;
            if !wanted() {
                return None;
            }
        }
        out.extend(points_for(
            arch,
            workload,
            runtime,
            &lengths[out.len()..],
            YIELD_AFTER_MS,
        ));
    }
    Some(out)
}

/// Lengths per request of a slow curve's workers: its progress moves by
/// these, and a worker waits at most one poll between them.
const SLOW_SHARE: usize = 4;

/// A slow job's curve ([`crate::jobs::is_slow`]) from workers of its own,
/// one per core, [`SLOW_SHARE`] lengths per request, while this thread only
/// hands out requests and shows the progress. Stopped, its workers with
/// it, once no longer `wanted` (an empty curve then). `None` where no
/// worker can start (this thread computes the curve then).
async fn slow_curve(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
    wanted: &impl Fn() -> bool,
    progress: &impl Fn(Option<f64>),
) -> Option<CurveData> {
    let script = POOL.with(|p| p.borrow().script_url.clone())?;
    let shares: Vec<&[u32]> = lengths.chunks(SLOW_SHARE).collect();
    let cores = web_sys::window().map_or(1, |w| w.navigator().hardware_concurrency() as usize);
    let count = cores.clamp(1, MAX_WORKERS + 1).min(shares.len());
    // Each worker and the share it is computing.
    let mut helpers: Vec<(Helper, Option<usize>)> = (0..count)
        .map_while(|_| Helper::start(&script))
        .map(|h| (h, None))
        .collect();
    if helpers.is_empty() {
        return None;
    }
    let inputs = Inputs {
        arch: arch.clone(),
        workload: workload.clone(),
        runtime: runtime.clone(),
    };
    let mut results: Vec<Option<Vec<PointResult>>> = vec![None; shares.len()];
    let failed = |share: &[u32], why: &str| -> Vec<PointResult> {
        let e = format!("a worker could not compute this length: {why}");
        share.iter().map(|_| Err(e.clone())).collect()
    };
    let mut next = 0;
    let mut done = 0;
    progress(Some(0.0));
    while done < shares.len() {
        if !wanted() {
            REPLACED.with(|r| r.set(r.get() + helpers.len() as u32));
            return Some(CurveData::default());
        }
        helpers.retain_mut(|(helper, busy)| {
            if let Some(text) = helper.answer() {
                if let Some(k) = busy.take() {
                    results[k] = Some(
                        read_estimates(&text, shares[k].len())
                            .unwrap_or_else(|e| failed(shares[k], &e)),
                    );
                    done += 1;
                }
            }
            if let Some(why) = helper.failure() {
                web_sys::console::warn_2(
                    &"a slow curve's worker stopped:".into(),
                    &why.clone().into(),
                );
                if let Some(k) = busy.take() {
                    results[k] = Some(failed(shares[k], &why));
                    done += 1;
                }
                return false;
            }
            if busy.is_none() && helper.ready() && next < shares.len() {
                let request = Request::curve(inputs.clone(), shares[next].to_vec()).to_json();
                if !helper.ask(&request) {
                    return false;
                }
                *busy = Some(next);
                next += 1;
            }
            true
        });
        if helpers.is_empty() {
            // Every worker stopped: the shares left are not computed here
            // (each would hold this thread for long).
            for (k, share) in shares.iter().enumerate() {
                if results[k].is_none() {
                    results[k] = Some(failed(share, "no worker thread is left"));
                }
            }
            break;
        }
        progress(Some(done as f64 / shares.len() as f64));
        sleep_ms(20).await;
    }
    progress(None);
    let results: Vec<PointResult> = results.into_iter().flatten().flatten().collect();
    Some(CurveData::from_results(lengths, results))
}

/// A curve's first draw, before it is complete.
pub struct FirstDraw<'a> {
    /// The chosen length, computed first (left out of the complete curve
    /// when it is not one of the curve's lengths).
    pub chosen: u32,
    /// Shows the first points: the chosen length's and those of this
    /// thread's share computed in [`FIRST_DRAW_MS`].
    pub show: &'a dyn Fn(CurveData),
}

/// The curve over `lengths`, shared between the ready workers and this
/// thread (which takes share 0 while the workers run theirs), each share
/// in [`curve::spread_order`], so that the points computed first spread
/// over the range; with `first`, this thread shows its first points after
/// [`FIRST_DRAW_MS`] (a quick curve is complete before then). `wanted`
/// says whether the curve is still needed: this thread stops its share
/// once it is not, and computes a share a worker could not answer only
/// while it is. `progress` hears this thread's fraction done while a slow
/// curve is computed, and `None` when it is over.
pub async fn curve(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
    first: Option<FirstDraw<'_>>,
    wanted: impl Fn() -> bool,
    progress: impl Fn(Option<f64>),
) -> CurveData {
    if crate::jobs::is_slow(arch, workload) {
        if let Some(curve) = slow_curve(arch, workload, runtime, lengths, &wanted, &progress).await
        {
            return curve;
        }
    }
    // Replacements for cancelled workers (`cancel_busy`) are given a
    // second to load, to share this (slow) curve.
    for _ in 0..50 {
        if replacements_loading() == 0 || !wanted() {
            break;
        }
        sleep_ms(20).await;
    }
    let begun = begin(arch, workload, runtime, lengths, first);
    finish(begun, arch, workload, runtime, wanted, progress).await
}

/// Whether a curve can [`begin`] at once, in the caller's task: not a slow
/// one, and no replacement worker is loading (then [`curve`] waits for it).
pub fn can_begin_at_once(arch: &Architecture, workload: &Workload) -> bool {
    !crate::jobs::is_slow(arch, workload) && replacements_loading() == 0
}

/// A curve [`begin`] has started: the workers' shares asked, this thread's
/// share and its points computed so far.
pub struct Begun {
    asked: Vec<(Vec<u32>, Promise, usize, u32)>,
    own: Vec<u32>,
    done: Vec<PointResult>,
    started: f64,
    /// This thread's weight in the split (each worker's is 1).
    page_weight: f64,
}

/// The start of [`curve`], all in the caller's task (an input's effect, so
/// that it is not queued behind the page's other updates): hands the
/// workers their shares, computes this thread's first points for
/// [`FIRST_DRAW_MS`] (the chosen length first) and, with `first`, shows
/// them unless the share is already done. [`finish`] does the rest.
pub fn begin(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
    first: Option<FirstDraw<'_>>,
) -> Begun {
    // A replacement still loading is not waited for again.
    POOL.with(|p| {
        for slot in p.borrow_mut().slots.iter_mut().filter(|s| !s.ready) {
            slot.replacement = false;
        }
    });
    let workers = ready();
    let parts = workers.len() + 1;
    let mut order = curve::spread_order(lengths);
    let chosen = first.as_ref().map(|f| f.chosen);
    if let Some(at) = order.iter().position(|&l| Some(l) == chosen) {
        // The chosen length is one of the curve's: this thread's first.
        order[..=at].rotate_right(1);
    }
    // The page's thread also draws and updates the page: its share follows
    // how the last curves went.
    let page_weight = PAGE_WEIGHT.with(std::cell::Cell::get);
    let mut weights = vec![1.0; parts];
    weights[0] = page_weight;
    let mut shares = weighted_shares(&order, &weights).into_iter();
    let own = shares.next().unwrap_or_default();
    let mut asked: Vec<(Vec<u32>, Promise, usize, u32)> = Vec::with_capacity(parts);
    for (mine, &worker) in shares.zip(&workers) {
        if mine.is_empty() {
            continue;
        }
        let inputs = Inputs {
            arch: arch.clone(),
            workload: workload.clone(),
            runtime: runtime.clone(),
        };
        let text = Request::curve(inputs, mine.clone()).to_json();
        let (promise, id) = request(worker, &text);
        asked.push((mine, promise, worker, id));
    }
    let started = now();
    let done = points_for(arch, workload, runtime, &own, FIRST_DRAW_MS);
    if let Some(first) = first.filter(|_| done.len() < own.len()) {
        // The chosen length, when the curve lacks it, is drawn first only.
        let in_range = |c: &u32| lengths.first() <= Some(c) && Some(c) <= lengths.last();
        let extra: Vec<u32> = chosen
            .filter(|c| in_range(c) && !lengths.contains(c))
            .into_iter()
            .collect();
        let mut shown: Vec<u32> = own[..done.len()].to_vec();
        shown.extend(&extra);
        let mut outcomes = done.clone();
        outcomes.extend(curve::estimate_lengths(arch, workload, runtime, &extra));
        (first.show)(CurveData::from_results(&shown, outcomes));
    }
    Begun {
        asked,
        own,
        done,
        started,
        page_weight,
    }
}

/// The rest of a curve [`begin`] started: this thread's share, yielding to
/// the browser every [`YIELD_AFTER_MS`] and stopping once the curve is no
/// longer `wanted`, then the workers' answers (a share a worker could not
/// answer is computed here).
pub async fn finish(
    begun: Begun,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    wanted: impl Fn() -> bool,
    progress: impl Fn(Option<f64>),
) -> CurveData {
    let Begun {
        asked,
        own,
        mut done,
        started,
        page_weight,
    } = begun;
    yield_to_browser().await;
    let rest = if wanted() {
        own_share(
            arch,
            workload,
            runtime,
            &own[done.len()..],
            &wanted,
            &progress,
        )
        .await
    } else {
        None
    };
    progress(None);
    crate::app::perf::reached(crate::app::perf::Milestone::PageShareDone);
    let own_took = now() - started;
    // A worker's share is 1 / page_weight times this one: give it twice
    // that time, and at least ANSWER_TIMEOUT.
    let took = std::time::Duration::from_secs_f64(own_took.max(0.0) * 2.0 / page_weight / 1000.0);
    for &(_, _, worker, id) in &asked {
        watch(worker, id, ANSWER_TIMEOUT.max(took));
    }
    let Some(rest) = rest else {
        // Superseded: nobody will look at this curve.
        return CurveData::default();
    };
    done.extend(rest);
    let mut results = done;
    let own_points = own.len();
    let mut all_lengths = own;
    let mut answered = Vec::with_capacity(asked.len());
    let mut every_worker_answered = true;
    for (mine, promise, _, id) in asked {
        let answer = wasm_bindgen_futures::JsFuture::from(promise)
            .await
            .ok()
            .and_then(|v| v.as_string())
            .ok_or_else(|| "worker: no answer".to_string())
            .and_then(|text| read_estimates(&text, mine.len()));
        let part = match answer {
            Ok(part) => {
                let at = ANSWERED_AT.with(|a| a.borrow().iter().find(|t| t.0 == id).map(|t| t.1));
                answered.extend(at.map(|at| (mine.len(), at - started)));
                part
            }
            // Superseded: nobody will look at this curve.
            Err(_) if !wanted() => return CurveData::default(),
            Err(e) => {
                every_worker_answered = false;
                FALLBACKS.with(|f| f.set(f.get() + 1));
                web_sys::console::warn_2(&"computing a worker's share here:".into(), &e.into());
                let part = own_share(arch, workload, runtime, &mine, &wanted, &progress).await;
                progress(None);
                match part {
                    Some(part) => part,
                    None => return CurveData::default(),
                }
            }
        };
        all_lengths.extend(mine);
        results.extend(part);
    }
    if every_worker_answered && !answered.is_empty() {
        PAGE_WEIGHT.with(|w| {
            w.set(curve::next_page_weight(
                w.get(),
                own_points,
                own_took,
                &answered,
            ))
        });
    }
    CurveData::from_results(&all_lengths, results)
}
