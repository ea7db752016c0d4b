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

use crate::curve::{self, weighted_shares, CurveData, PointResult};
use crate::protocol::{self, read_estimates, Inputs, Request};
use headroom_core::arch::Architecture;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use js_sys::{Array, Function, Promise, Reflect};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Blob, BlobPropertyBag, MessageEvent, Url, Worker, WorkerOptions, WorkerType};

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

struct Slot {
    worker: Worker,
    ready: bool,
    dead: bool,
    /// Started by [`cancel_busy`] in place of a cancelled worker.
    replacement: bool,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_error: Closure<dyn FnMut(JsValue)>,
}

#[derive(Default)]
struct Pool {
    started: bool,
    slots: Vec<Slot>,
    /// The workers' script (a blob URL), to start a replacement.
    script_url: Option<String>,
    /// Requests in flight: (id, slot, resolve); a handful at a time.
    waiting: Vec<(u32, usize, Function)>,
    next_id: u32,
}

thread_local! {
    static POOL: RefCell<Pool> = RefCell::new(Pool::default());
    static FALLBACKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static REPLACED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static ANSWERED_ONE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    static STOPPED_ONE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The page's thread's share of the next curve against one worker's
    /// ([`curve::next_page_weight`]).
    static PAGE_WEIGHT: std::cell::Cell<f64> = const { std::cell::Cell::new(1.0) };
    /// When the latest answers reached the page's thread: (request id, ms).
    static ANSWERED_AT: RefCell<Vec<(u32, f64)>> = const { RefCell::new(Vec::new()) };
}

/// Answer times [`ANSWERED_AT`] keeps (a curve asks one per worker).
const ANSWER_TIMES_KEPT: usize = 2 * MAX_WORKERS;

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

/// The URLs of this module's JS glue and wasm, from the resources the page
/// loaded (`*_bg.wasm`, next to the glue `*.js` wasm-bindgen writes; not
/// the panels module's, `crate::app::lazy`).
pub(crate) fn module_urls() -> Option<(String, String)> {
    let performance = web_sys::window()?.performance()?;
    let entries: Array = performance.get_entries_by_type("resource");
    entries.iter().find_map(|entry| {
        let name = Reflect::get(&entry, &"name".into()).ok()?.as_string()?;
        let path = name.split(['?', '#']).next()?;
        let stem = path.strip_suffix("_bg.wasm")?;
        if stem.ends_with(crate::app::lazy::PANELS_MODULE) {
            return None;
        }
        Some((format!("{stem}.js"), path.to_string()))
    })
}

fn worker_script(glue: &str, wasm: &str) -> String {
    // `glue` and `wasm` are URLs the page itself loaded; JSON quoting keeps
    // them literal.
    let glue = serde_json::Value::from(glue).to_string();
    let wasm = serde_json::Value::from(wasm).to_string();
    format!(
        "try {{
  const glue = await import({glue});
  await glue.default({{ module_or_path: {wasm} }});
  self.onmessage = (e) => {{
    let out;
    try {{ out = glue.headroom_answer(e.data.request); }}
    catch (err) {{
      // A trapped instance is not to be trusted again: answer, then stop.
      self.postMessage({{ id: e.data.id, out: 'E worker request: ' + err + '\\n' }});
      self.postMessage({{ failed: String(err) }});
      return;
    }}
    self.postMessage({{ id: e.data.id, out }});
  }};
  self.postMessage({{ ready: true }});
}} catch (err) {{
  self.postMessage({{ failed: String(err) }});
}}"
    )
}

/// Puts the number of ready workers on `<body data-curve-workers>`, for a
/// DOM dump to read (`scripts/test.sh` checks the served page).
fn show_ready() {
    if let Some(body) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.body())
    {
        let _ = body.set_attribute("data-curve-workers", &ready().len().to_string());
    }
}

/// Marks slot `i` dead and answers its requests in flight with an error,
/// so that their shares are computed on the page's thread.
fn kill(i: usize) {
    let orphans: Vec<Function> = POOL.with(|p| {
        let mut p = p.borrow_mut();
        if let Some(slot) = p.slots.get_mut(i) {
            slot.dead = true;
            slot.ready = false;
            slot.worker.terminate();
        }
        let (orphans, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut p.waiting)
            .into_iter()
            .partition(|w| w.1 == i);
        p.waiting = kept;
        orphans.into_iter().map(|w| w.2).collect()
    });
    show_ready();
    for resolve in orphans {
        let _ = resolve.call1(
            &JsValue::NULL,
            &JsValue::from_str("E worker request: the worker stopped\n"),
        );
    }
}

fn on_message(i: usize, event: MessageEvent) {
    let data = event.data();
    let field = |name: &str| Reflect::get(&data, &name.into()).unwrap_or(JsValue::UNDEFINED);
    if field("ready").is_truthy() {
        POOL.with(|p| {
            if let Some(slot) = p.borrow_mut().slots.get_mut(i) {
                slot.ready = !slot.dead;
            }
        });
        // Visible to a DOM dump (`scripts/test.sh` checks the served page).
        if let Some(body) = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.body())
        {
            let _ = body.set_attribute("data-curve-workers", &ready().len().to_string());
        }
        return;
    }
    if let Some(reason) = field("failed").as_string() {
        web_sys::console::warn_2(&"a curve worker stopped:".into(), &reason.into());
        kill(i);
        return;
    }
    let (Some(id), Some(out)) = (field("id").as_f64(), field("out").as_string()) else {
        return;
    };
    let resolve = POOL.with(|p| {
        let mut p = p.borrow_mut();
        let at = p.waiting.iter().position(|w| w.0 == id as u32)?;
        Some(p.waiting.swap_remove(at))
    });
    if let Some((_, _, resolve)) = resolve {
        crate::app::perf::reached(crate::app::perf::Milestone::WorkerAnswered);
        ANSWERED_AT.with(|a| {
            let mut a = a.borrow_mut();
            if a.len() == ANSWER_TIMES_KEPT {
                a.remove(0);
            }
            a.push((id as u32, now()));
        });
        let _ = resolve.call1(&JsValue::NULL, &JsValue::from_str(&out));
    }
}

fn spawn(i: usize, script_url: &str) -> Option<Slot> {
    let options = WorkerOptions::new();
    options.set_type(WorkerType::Module);
    let worker = Worker::new_with_options(script_url, &options).ok()?;
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e| on_message(i, e));
    let on_error = Closure::<dyn FnMut(JsValue)>::new(move |_| kill(i));
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Some(Slot {
        worker,
        ready: false,
        dead: false,
        replacement: false,
        _on_message: on_message,
        _on_error: on_error,
    })
}

/// Starts the workers once; they become usable when their module has
/// loaded. Does nothing where workers cannot start.
pub fn start() {
    if POOL.with(|p| p.borrow().started) {
        return;
    }
    let Some(window) = web_sys::window() else {
        return;
    };
    let cores = window.navigator().hardware_concurrency() as usize;
    let count = cores.saturating_sub(1).min(MAX_WORKERS);
    // Until the page's own module shows in its resources, try again at the
    // next curve. (With one core the pool is empty, but a slow job's
    // workers of their own still start from the module.)
    let Some((glue, wasm)) = module_urls() else {
        return;
    };
    POOL.with(|p| p.borrow_mut().started = true);
    let parts = Array::of1(&JsValue::from_str(&worker_script(&glue, &wasm)));
    let options = BlobPropertyBag::new();
    options.set_type("text/javascript");
    let Ok(blob) = Blob::new_with_str_sequence_and_options(&parts, &options) else {
        return;
    };
    let Ok(url) = Url::create_object_url_with_blob(&blob) else {
        return;
    };
    // Slot numbers are the workers' own (their callbacks carry them): stop
    // at the first worker that cannot be created.
    let slots: Vec<Slot> = (0..count).map_while(|i| spawn(i, &url)).collect();
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        p.slots = slots;
        p.script_url = Some(url);
    });
}

/// Workers ready to take a share.
pub fn ready() -> Vec<usize> {
    POOL.with(|p| {
        p.borrow()
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.ready && !s.dead)
            .map(|(i, _)| i)
            .collect()
    })
}

/// Replacement workers still loading their module.
fn replacements_loading() -> usize {
    POOL.with(|p| {
        p.borrow()
            .slots
            .iter()
            .filter(|s| s.replacement && !s.ready && !s.dead)
            .count()
    })
}

/// Replaces every worker still computing a share: called when a slow
/// curve is superseded, so that the next curve does not queue behind
/// seconds of work nobody will look at. The replacements load the module
/// again (a fraction of a second) before they take shares.
pub fn cancel_busy() {
    let (busy, url): (Vec<usize>, Option<String>) = POOL.with(|p| {
        let p = p.borrow();
        let mut busy: Vec<usize> = p.waiting.iter().map(|w| w.1).collect();
        crate::sort::by_key(&mut busy, |&w| (w as u64, 0));
        busy.dedup();
        (busy, p.script_url.clone())
    });
    let Some(url) = url else { return };
    for i in busy {
        kill(i);
        REPLACED.with(|r| r.set(r.get() + 1));
        if let Some(mut slot) = spawn(i, &url) {
            slot.replacement = true;
            POOL.with(|p| {
                if let Some(old) = p.borrow_mut().slots.get_mut(i) {
                    *old = slot;
                }
            });
        }
    }
    show_ready();
}

/// Sends a request to worker `i`; the promise resolves with its answer.
/// Returns the request's id too, for [`watch`].
fn request(i: usize, request: &str) -> (Promise, u32) {
    let mut id = 0;
    let mut worker = None;
    let promise = Promise::new(&mut |resolve, _reject| {
        POOL.with(|p| {
            let mut p = p.borrow_mut();
            id = p.next_id;
            p.next_id = p.next_id.wrapping_add(1);
            p.waiting.push((id, i, resolve));
            worker = p.slots.get(i).map(|s| s.worker.clone());
        });
    });
    let message = request_message(id, request);
    // A request that cannot be posted is answered at once with an error.
    if worker.is_none_or(|w| w.post_message(&message).is_err()) {
        kill(i);
    }
    (promise, id)
}

/// The message a worker's script answers: `{ id, request }`.
fn request_message(id: u32, request: &str) -> js_sys::Object {
    let message = js_sys::Object::new();
    let _ = Reflect::set(&message, &"id".into(), &JsValue::from(id));
    let _ = Reflect::set(&message, &"request".into(), &JsValue::from_str(request));
    message
}

/// Stops worker `i` if request `id` is still unanswered after `patience`.
fn watch(i: usize, id: u32, patience: std::time::Duration) {
    leptos::prelude::set_timeout(
        move || {
            let unanswered = POOL.with(|p| p.borrow().waiting.iter().any(|w| w.0 == id));
            if unanswered {
                kill(i);
            }
        },
        patience,
    );
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

/// The estimate at `length`, from a worker of its own (the page stays
/// responsive through a slow one: a generation of a million new tokens
/// replays for seconds), stopped as soon as the estimate is no longer
/// `wanted` (`None` then). The curve's workers are left to the curve. Where
/// no worker can start, it is computed on this thread once the browser has
/// drawn the pending state.
pub async fn estimate_one(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    length: u32,
    wanted: impl Fn() -> bool,
) -> Option<PointResult> {
    let request = Request::Estimate {
        inputs: Inputs {
            arch: arch.clone(),
            workload: workload.clone(),
            runtime: runtime.clone(),
        },
        length,
    };
    match ask_alone(&request, &wanted).await? {
        Ok(text) => match read_estimates(&text, 1) {
            Ok(mut results) => return results.pop(),
            Err(e) => note_fallback(e),
        },
        Err(e) => note_fallback(e),
    }
    yield_to_browser().await;
    if !wanted() {
        return None;
    }
    let mut replay = headroom_core::trace::Replay::new(runtime.allocator, None);
    Some(curve::estimate_point(
        &mut replay,
        arch,
        workload,
        runtime,
        length,
    ))
}

/// The GPU table (`fit::rows` for `driver_peak` and `margin_pct`) from a
/// worker of its own, stopped once no longer `wanted` (`None`); an error
/// when no worker could answer (the caller computes it itself).
pub async fn fit_rows(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<headroom_core::Bytes>,
    margin_pct: u32,
    wanted: impl Fn() -> bool,
) -> Option<Result<Vec<crate::fit::FitRow>, String>> {
    let request = Request::FitRows {
        inputs: Inputs {
            arch: arch.clone(),
            workload: workload.clone(),
            runtime: runtime.clone(),
        },
        margin_pct,
    };
    let answer = ask_alone(&request, &wanted).await?;
    let reservation = crate::fit::reservation(arch, workload, runtime, driver_peak, margin_pct);
    Some(answer.and_then(|text| protocol::decode_rows(&text, reservation)))
}

fn note_fallback(e: String) {
    FALLBACKS.with(|f| f.set(f.get() + 1));
    web_sys::console::warn_1(&e.into());
}

/// `request` answered by a worker of its own (the page's module), counted
/// in [`answered_one`]; `None` once no longer `wanted`.
async fn ask_alone(
    request: &Request,
    wanted: &impl Fn() -> bool,
) -> Option<Result<String, String>> {
    let Some(script) = POOL.with(|p| p.borrow().script_url.clone()) else {
        return Some(Err(String::from("no worker")));
    };
    let answer = one_off(&script, &request.to_json(), wanted).await?;
    if answer.is_ok() {
        ANSWERED_ONE.with(|n| n.set(n.get() + 1));
    }
    Some(answer)
}

/// A worker of its own, started from the page's module: it answers one
/// request at a time, and is stopped when dropped.
struct Helper {
    worker: Worker,
    inbox: std::rc::Rc<RefCell<Inbox>>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
}

/// What a [`Helper`] said.
#[derive(Default)]
struct Inbox {
    ready: bool,
    answer: Option<String>,
    failed: Option<String>,
}

impl Helper {
    /// Starts a worker from `script` (it loads the module, then is ready).
    fn start(script: &str) -> Option<Helper> {
        let options = WorkerOptions::new();
        options.set_type(WorkerType::Module);
        let worker = Worker::new_with_options(script, &options).ok()?;
        let inbox = std::rc::Rc::new(RefCell::new(Inbox::default()));
        let on_message = {
            let inbox = inbox.clone();
            Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
                let data = event.data();
                let field =
                    |name: &str| Reflect::get(&data, &name.into()).unwrap_or(JsValue::UNDEFINED);
                let mut inbox = inbox.borrow_mut();
                if field("ready").is_truthy() {
                    inbox.ready = true;
                } else if let Some(out) = field("out").as_string() {
                    inbox.answer = Some(out);
                } else if let Some(reason) = field("failed").as_string() {
                    inbox.failed = Some(reason);
                }
            })
        };
        // A module that fails to load or a trapped instance says so in a
        // `failed` message (the worker script's try/catch).
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(Helper {
            worker,
            inbox,
            _on_message: on_message,
        })
    }

    /// Whether its module has loaded (it takes requests).
    fn ready(&self) -> bool {
        self.inbox.borrow().ready
    }

    /// Sends `request`; false if it cannot be sent.
    fn ask(&self, request: &str) -> bool {
        self.worker
            .post_message(&request_message(0, request))
            .is_ok()
    }

    /// The answer to the request sent, once in.
    fn answer(&self) -> Option<String> {
        self.inbox.borrow_mut().answer.take()
    }

    /// Why the worker stopped, if it did.
    fn failure(&self) -> Option<String> {
        self.inbox.borrow_mut().failed.take()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.worker.terminate();
        self.worker.set_onmessage(None);
    }
}

/// Starts a worker from `script`, asks it `request` once it has loaded,
/// and stops it when it has answered (its text) or the answer is no longer
/// `wanted` (`None`).
async fn one_off(
    script: &str,
    request: &str,
    wanted: &impl Fn() -> bool,
) -> Option<Result<String, String>> {
    let Some(helper) = Helper::start(script) else {
        return Some(Err(String::from("no worker")));
    };
    let mut asked = false;
    loop {
        if !wanted() {
            STOPPED_ONE.with(|n| n.set(n.get() + 1));
            return None;
        }
        if let Some(text) = helper.answer() {
            return Some(Ok(text));
        }
        if let Some(e) = helper.failure() {
            return Some(Err(e));
        }
        if !asked && helper.ready() {
            if !helper.ask(request) {
                return Some(Err(String::from("no worker")));
            }
            asked = true;
        }
        sleep_ms(20).await;
    }
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
