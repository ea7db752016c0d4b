//! Timing of input changes to chart redraws, read by the performance
//! test: to the first chart for the new inputs (a curve's first points)
//! and to the complete curve, how long drawing the chart takes, and the
//! moments in between ([`Milestone`]).

use std::cell::{Cell, RefCell};

thread_local! {
    static INPUT_AT: Cell<Option<f64>> = const { Cell::new(None) };
    static FIRST_DRAWN: Cell<bool> = const { Cell::new(false) };
    static TIMINGS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static COMPLETE_TIMINGS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static DRAWS: Cell<u32> = const { Cell::new(0) };
    static DRAW_TIMES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    static COMPLETE_DRAWS: Cell<u32> = const { Cell::new(0) };
    static MILESTONES: RefCell<[Vec<f64>; Milestone::COUNT]> = const { RefCell::new([const { Vec::new() }; Milestone::COUNT]) };
}

/// A moment between an input and its complete curve's drawing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Milestone {
    /// The page's thread has computed its share of the curve.
    PageShareDone,
    /// A curve worker's answer reached the page's thread.
    WorkerAnswered,
    /// The complete curve was handed to the chart.
    CurveLanded,
}

impl Milestone {
    const COUNT: usize = 3;
}

/// Records that `milestone` was reached, in ms since the input that an
/// input handler is timing (nothing when none is).
pub fn reached(milestone: Milestone) {
    if let Some(start) = INPUT_AT.with(Cell::get) {
        let ms = now() - start;
        MILESTONES.with(|m| m.borrow_mut()[milestone as usize].push(ms));
    }
}

/// When `milestone` was reached after each timed input since the last
/// call, ms.
pub fn take_milestones(milestone: Milestone) -> Vec<f64> {
    MILESTONES.with(|m| std::mem::take(&mut m.borrow_mut()[milestone as usize]))
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
    FIRST_DRAWN.with(|f| f.set(false));
}

/// Called when the chart has been drawn; `complete` when it shows the
/// whole curve (not only its first points).
pub fn drawn(complete: bool) {
    DRAWS.with(|d| d.set(d.get() + 1));
    if complete {
        COMPLETE_DRAWS.with(|d| d.set(d.get() + 1));
    }
    let Some(start) = INPUT_AT.with(Cell::get) else {
        return;
    };
    let ms = now() - start;
    if !FIRST_DRAWN.with(|f| f.replace(true)) {
        TIMINGS.with(|t| t.borrow_mut().push(ms));
    }
    if complete {
        INPUT_AT.with(|c| c.set(None));
        COMPLETE_TIMINGS.with(|t| t.borrow_mut().push(ms));
    }
}

/// How long one chart draw took, ms (the drawing alone), recorded while
/// an input waits for its complete curve.
pub fn draw_took(ms: f64) {
    if INPUT_AT.with(Cell::get).is_some() {
        DRAW_TIMES.with(|t| t.borrow_mut().push(ms));
    }
}

/// Draw times recorded since the last call, ms.
pub fn take_draw_times() -> Vec<f64> {
    DRAW_TIMES.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// Chart draws since the page loaded.
pub fn draws() -> u32 {
    DRAWS.with(Cell::get)
}

/// Chart draws of a complete curve since the page loaded.
pub fn complete_draws() -> u32 {
    COMPLETE_DRAWS.with(Cell::get)
}

/// Input-to-first-redraw times recorded since the last call, ms.
pub fn take() -> Vec<f64> {
    TIMINGS.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// Input-to-complete-curve times recorded since the last call, ms.
pub fn take_complete() -> Vec<f64> {
    COMPLETE_TIMINGS.with(|t| std::mem::take(&mut *t.borrow_mut()))
}
