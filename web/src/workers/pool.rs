//! The curve's pool of workers: one module worker per spare core, started
//! once from the module the page loaded, each answering one request at a
//! time; a worker that fails, traps or is superseded is stopped and its
//! requests in flight answered with an error.

use super::{now, MAX_WORKERS, REPLACED};
use js_sys::{Array, Function, Promise, Reflect};
use std::cell::RefCell;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{Blob, BlobPropertyBag, MessageEvent, Url, Worker, WorkerOptions, WorkerType};

pub(super) struct Slot {
    worker: Worker,
    pub(super) ready: bool,
    dead: bool,
    /// Started by [`cancel_busy`] in place of a cancelled worker.
    pub(super) replacement: bool,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_error: Closure<dyn FnMut(JsValue)>,
}

#[derive(Default)]
pub(super) struct Pool {
    started: bool,
    pub(super) slots: Vec<Slot>,
    /// The workers' script (a blob URL), to start a replacement.
    pub(super) script_url: Option<String>,
    /// Requests in flight: (id, slot, resolve); a handful at a time.
    waiting: Vec<(u32, usize, Function)>,
    next_id: u32,
}

thread_local! {
    pub(super) static POOL: RefCell<Pool> = RefCell::new(Pool::default());
    /// When the latest answers reached the page's thread: (request id, ms).
    pub(super) static ANSWERED_AT: RefCell<Vec<(u32, f64)>> = const { RefCell::new(Vec::new()) };
}

/// Answer times [`ANSWERED_AT`] keeps (a curve asks one per worker).
const ANSWER_TIMES_KEPT: usize = 2 * MAX_WORKERS;

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
pub(super) fn replacements_loading() -> usize {
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
pub(super) fn request(i: usize, request: &str) -> (Promise, u32) {
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
pub(super) fn request_message(id: u32, request: &str) -> js_sys::Object {
    let message = js_sys::Object::new();
    let _ = Reflect::set(&message, &"id".into(), &JsValue::from(id));
    let _ = Reflect::set(&message, &"request".into(), &JsValue::from_str(request));
    message
}

/// Stops worker `i` if request `id` is still unanswered after `patience`.
pub(super) fn watch(i: usize, id: u32, patience: std::time::Duration) {
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
