//! Progress on a terminal for work that takes over a second: drawn on
//! stderr only when it is a terminal, and only once the work has run a
//! second (quick commands stay silent). `HEADROOM_PROGRESS_AFTER_MS` sets
//! that delay in milliseconds (the tests draw at once with 0); a value
//! that is not a whole number is ignored.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long work runs before its progress is drawn, unless
/// `HEADROOM_PROGRESS_AFTER_MS` says otherwise ([`show_after`]).
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// How long work runs before its progress is drawn: [`SHOW_AFTER`], or
/// `HEADROOM_PROGRESS_AFTER_MS` milliseconds.
pub fn show_after() -> Duration {
    std::env::var("HEADROOM_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(SHOW_AFTER, Duration::from_millis)
}

/// A bar over `len` items (`template` as indicatif's), hidden until
/// [`Counted::inc`] finds that [`show_after`] has passed.
pub struct Counted {
    bar: ProgressBar,
    started: Instant,
    after: Duration,
    shown: bool,
}

impl Counted {
    /// A hidden bar over `len` items.
    pub fn new(len: u64, template: &str) -> Counted {
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
        bar.set_style(ProgressStyle::with_template(template).expect("template"));
        Counted {
            bar,
            started: Instant::now(),
            after: show_after(),
            shown: false,
        }
    }

    /// More items to come.
    pub fn add(&self, items: u64) {
        self.bar.inc_length(items);
    }

    /// One item done; draws the bar once the work has run a second.
    pub fn inc(&mut self) {
        self.bar.inc(1);
        if !self.shown && self.started.elapsed() >= self.after {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Removes the bar.
    pub fn finish(self) {
        self.bar.finish_and_clear();
    }
}

/// Runs `work`, showing a spinner with `what` and the elapsed time if it
/// takes over [`show_after`] (one replay has no count to show).
pub fn while_working<T>(what: &str, work: impl FnOnce() -> T) -> T {
    let spinner = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
    spinner
        .set_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("template"));
    spinner.set_message(what.to_string());
    let (done, finished) = mpsc::channel::<()>();
    let after = show_after();
    let watcher = {
        let spinner = spinner.clone();
        std::thread::spawn(move || {
            if finished.recv_timeout(after).is_err() {
                spinner.set_draw_target(ProgressDrawTarget::stderr());
                spinner.enable_steady_tick(Duration::from_millis(120));
                let _ = finished.recv();
            }
        })
    };
    let out = work();
    let _ = done.send(());
    let _ = watcher.join();
    spinner.finish_and_clear();
    out
}
