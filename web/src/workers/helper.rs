//! Workers of their own, one per job: a slow estimate, the GPU table,
//! a slow curve's shares ([`Helper`]), each stopped when dropped or when
//! its answer is no longer wanted.

use super::pool::{request_message, POOL};
use super::{sleep_ms, yield_to_browser, ANSWERED_ONE, FALLBACKS, STOPPED_ONE};
use crate::curve::{self, PointResult};
use crate::protocol::{self, read_estimates, Inputs, Request};
use headroom_core::arch::Architecture;
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use js_sys::Reflect;
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{MessageEvent, Worker, WorkerOptions, WorkerType};

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

/// The GPU table (`gpu_rows::rows` for `driver_peak` and `margin_pct`) from a
/// worker of its own, stopped once no longer `wanted` (`None`); an error
/// when no worker could answer (the caller computes it itself).
pub async fn fit_rows(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<headroom_core::Bytes>,
    margin_pct: u32,
    wanted: impl Fn() -> bool,
) -> Option<Result<Vec<crate::gpu_rows::FitRow>, String>> {
    let request = Request::FitRows {
        inputs: Inputs {
            arch: arch.clone(),
            workload: workload.clone(),
            runtime: runtime.clone(),
        },
        margin_pct,
    };
    let answer = ask_alone(&request, &wanted).await?;
    let reservation =
        crate::gpu_rows::reservation(arch, workload, runtime, driver_peak, margin_pct);
    Some(answer.and_then(|text| protocol::decode_rows(&text, reservation)))
}

fn note_fallback(e: String) {
    FALLBACKS.with(|f| f.set(f.get() + 1));
    web_sys::console::warn_1(&e.into());
}

/// `request` answered by a worker of its own (the page's module), counted
/// in [`super::answered_one`]; `None` once no longer `wanted`.
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
pub(super) struct Helper {
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
    pub(super) fn start(script: &str) -> Option<Helper> {
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
    pub(super) fn ready(&self) -> bool {
        self.inbox.borrow().ready
    }

    /// Sends `request`; false if it cannot be sent.
    pub(super) fn ask(&self, request: &str) -> bool {
        self.worker
            .post_message(&request_message(0, request))
            .is_ok()
    }

    /// The answer to the request sent, once in.
    pub(super) fn answer(&self) -> Option<String> {
        self.inbox.borrow_mut().answer.take()
    }

    /// Why the worker stopped, if it did.
    pub(super) fn failure(&self) -> Option<String> {
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
