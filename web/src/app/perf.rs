//! Timing of input changes to finished chart redraws, read by the
//! performance test.

use std::cell::{Cell, RefCell};

thread_local! {
    static INPUT_AT: Cell<Option<f64>> = const { Cell::new(None) };
    static TIMINGS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static DRAWS: Cell<u32> = const { Cell::new(0) };
}

/// `performance.now()` in ms.
pub fn now() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Called at the start of every input handler.
pub fn input() {
    INPUT_AT.with(|c| c.set(Some(now())));
}

/// Called when the chart has been drawn.
pub fn drawn() {
    DRAWS.with(|d| d.set(d.get() + 1));
    if let Some(start) = INPUT_AT.with(|c| c.take()) {
        let ms = now() - start;
        TIMINGS.with(|t| t.borrow_mut().push(ms));
    }
}

/// Chart draws since the page loaded.
pub fn draws() -> u32 {
    DRAWS.with(Cell::get)
}

/// Input-to-redraw times recorded since the last call, ms.
pub fn take() -> Vec<f64> {
    TIMINGS.with(|t| std::mem::take(&mut *t.borrow_mut()))
}
