//! Memory over the job: allocated and reserved bytes after every
//! allocation and free of a replay, reduced to at most [`MAX_POINTS`]
//! points as it runs. Each point covers a run of consecutive events and
//! keeps their highest allocated and highest reserved bytes, and the op of
//! the highest reserved, so every local maximum at the point's scale, and
//! the job's peak, are exact. When the points fill up, neighbours merge in
//! pairs and each point covers twice as many events: memory stays bounded
//! whatever the job's length.
//!
//! The timeline also follows the job's phases ([`Phase`]) event by event,
//! from the names the families give their ops, and keeps where each phase
//! (and each training step or ESMFold recycle) starts: [`Timeline::spans`].

use crate::trace::Op;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;

/// Most points a timeline keeps.
pub const MAX_POINTS: usize = 1024;

/// Most phase spans a timeline keeps; a later change of phase is not
/// recorded (the last span runs to the end). Training records three per
/// step, a generation two, a fold one per recycle.
pub const MAX_SPANS: usize = 1024;

/// What part of the job an event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Building or loading the model.
    Load,
    /// A forward pass (each ESMFold recycle is one).
    Forward,
    /// Backward, checkpoint recomputation included.
    Backward,
    /// `optimizer.step()` and `zero_grad`, and optimizer state created ahead.
    Optimizer,
    /// A generation's forward pass over the prompt.
    Prefill,
    /// A generation's decode steps, one token each.
    Decode,
}

impl Phase {
    /// Its name on a chart.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Load => "load",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

/// Where a phase starts: from this event on (to the next span's first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first event of the span.
    pub first_event: u64,
    /// The phase.
    pub phase: Phase,
    /// The training step or ESMFold recycle, when the job has them.
    pub step: Option<u32>,
    /// What a step is called: "step", "recycle" (ESMFold) or "batch" (an
    /// inference loop); empty means "step".
    pub step_kind: &'static str,
}

impl Span {
    /// The phase as a chart labels it, with its step or recycle counted
    /// from 1 ([`Span::step_number`], as the estimate's peak op counts):
    /// `forward`, `forward, step 1`, `recycle 2`.
    pub fn label(&self) -> String {
        match self.step_number() {
            Some(n) if self.step_kind == "recycle" => alloc::format!("recycle {n}"),
            Some(n) if self.step_kind.is_empty() => {
                alloc::format!("{}, step {n}", self.phase.label())
            }
            Some(n) => alloc::format!("{}, {} {n}", self.phase.label(), self.step_kind),
            None => self.phase.label().to_string(),
        }
    }

    /// The span's step or recycle as people count them, from 1 (the
    /// replay's `step` counts from 0): one count for the breakdown's peak
    /// op, the timeline's bands, its CSV and the JSON.
    pub fn step_number(&self) -> Option<u32> {
        self.step.map(|n| n.saturating_add(1))
    }
}

/// The span `event` falls in: the last of `spans` (in order) starting at
/// or before it.
pub fn span_at(spans: &[Span], event: u64) -> Option<&Span> {
    spans.iter().rev().find(|s| s.first_event <= event)
}

/// The header of [`csv`].
pub const CSV_HEADER: &str =
    "first_event,events,phase,step,layer,op,allocated_bytes,reserved_bytes,driver_bytes";

/// A timeline as CSV ([`CSV_HEADER`]): one row per point, with the phase
/// it starts in ([`Span::label`]) and that phase's step counted from 1
/// ([`Span::step_number`]: a row whose run crosses into the next step keeps
/// the step of its phase), the op of its highest reserved bytes (both
/// quoted), and driver-level bytes as reserved plus `outside_allocator`.
pub fn csv(points: &[TimelinePoint], spans: &[Span], outside_allocator: u64) -> String {
    let quoted = |text: &str| text.replace('"', "\"\"");
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for p in points {
        let span = span_at(spans, p.first_event);
        let phase = span.map_or(String::new(), Span::label);
        let step = span
            .and_then(Span::step_number)
            .map_or(String::new(), |s| s.to_string());
        let layer = p.op.layer.map_or(String::new(), |l| l.to_string());
        let _ = writeln!(
            out,
            "{},{},\"{}\",{},{},\"{}\",{},{},{}",
            p.first_event,
            p.events,
            quoted(&phase),
            step,
            layer,
            quoted(p.op.name),
            p.allocated,
            p.reserved,
            p.reserved.saturating_add(outside_allocator)
        );
    }
    out
}

/// A run of consecutive allocation and free events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelinePoint {
    /// The first event of the run (0-based, counting every allocation and free).
    pub first_event: u64,
    /// Events in the run.
    pub events: u64,
    /// Highest allocated bytes in the run.
    pub allocated: u64,
    /// Highest reserved bytes in the run.
    pub reserved: u64,
    /// The op of the run's highest allocated bytes, the first such event
    /// (as the estimate's peak moment, `trace::PeakMoment`).
    pub op: Op,
}

/// The index of the point holding the job's peak moment: the highest
/// allocated bytes, the first of equals (its op is the estimate's
/// `peak_op`).
pub fn peak_index(points: &[TimelinePoint]) -> Option<usize> {
    let mut peak: Option<usize> = None;
    for (i, point) in points.iter().enumerate() {
        if peak.is_none_or(|p| point.allocated > points[p].allocated) {
            peak = Some(i);
        }
    }
    peak
}

/// A replay's memory over time.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    points: Vec<TimelinePoint>,
    /// Events per point.
    width: u64,
    /// Events seen.
    events: u64,
    /// Where each phase starts.
    spans: Vec<Span>,
    /// A generation's next-token op has run: what follows decodes.
    generating: bool,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline {
            points: Vec::with_capacity(MAX_POINTS),
            width: 1,
            events: 0,
            spans: Vec::new(),
            generating: false,
        }
    }

    /// The phase of an event of `op`, following the phase so far: loading
    /// ops are named `load…`, backward starts at the op named `backward`
    /// (its nodes then carry their forward ops' names), the optimizer's ops
    /// are `optimizer…` and `zero_grad…`, a new training step or recycle
    /// starts a forward pass, and a generation decodes after its first
    /// `generate:` op (the forward pass before it is the prefill).
    fn phase_of(&mut self, op: &Op) -> Phase {
        let name = op.name;
        let last = self.spans.last();
        let current = last.map_or(Phase::Load, |s| s.phase);
        let new_step = last.is_some_and(|s| s.step != op.step);
        if name.starts_with("load") {
            Phase::Load
        } else if name.starts_with("backward") {
            Phase::Backward
        } else if name.starts_with("optimizer") || name.starts_with("zero_grad") {
            Phase::Optimizer
        } else if name.starts_with("generate:") {
            self.generating = true;
            current
        } else if self.generating {
            Phase::Decode
        } else if new_step || current == Phase::Load || current == Phase::Optimizer {
            Phase::Forward
        } else {
            current
        }
    }

    /// Records where a phase starts, when `event` starts one.
    fn follow_phase(&mut self, event: u64, op: &Op) {
        let phase = self.phase_of(op);
        if self
            .spans
            .last()
            .is_some_and(|s| s.phase == phase && s.step == op.step)
            || self.spans.len() == MAX_SPANS
        {
            return;
        }
        if let Some(last) = self.spans.last_mut() {
            // Setting up before the first step (inputs, workspaces) joins
            // the first step's forward pass.
            if last.phase == phase && last.step.is_none() && phase == Phase::Forward {
                last.step = op.step;
                last.step_kind = op.step_kind;
                return;
            }
        }
        if phase == Phase::Decode {
            // What ran before the first decode step was the prompt's pass.
            for span in self.spans.iter_mut().filter(|s| s.phase == Phase::Forward) {
                span.phase = Phase::Prefill;
            }
        }
        self.spans.push(Span {
            first_event: event,
            phase,
            step: op.step,
            step_kind: op.step_kind,
        });
    }

    /// One event: the totals right after it, and the op that caused it.
    pub fn observe(&mut self, op: Op, allocated: u64, reserved: u64) {
        let event = self.events;
        self.events += 1;
        self.follow_phase(event, &op);
        if let Some(last) = self.points.last_mut() {
            if last.events < self.width {
                last.events += 1;
                last.reserved = last.reserved.max(reserved);
                if allocated > last.allocated {
                    last.allocated = allocated;
                    last.op = op;
                }
                return;
            }
        }
        if self.points.len() == MAX_POINTS {
            self.halve();
        }
        self.points.push(TimelinePoint {
            first_event: event,
            events: 1,
            allocated,
            reserved,
            op,
        });
    }

    /// Merges neighbouring points in pairs; each then covers twice the events.
    fn halve(&mut self) {
        let merged: Vec<TimelinePoint> = self
            .points
            .chunks(2)
            .map(|pair| match pair {
                [a, b] => {
                    let peak = if b.allocated > a.allocated { b } else { a };
                    TimelinePoint {
                        first_event: a.first_event,
                        events: a.events + b.events,
                        allocated: peak.allocated,
                        reserved: a.reserved.max(b.reserved),
                        op: peak.op,
                    }
                }
                [a] => *a,
                _ => unreachable!("chunks of two"),
            })
            .collect();
        self.points = merged;
        self.width *= 2;
    }

    /// The points, in order.
    pub fn points(&self) -> &[TimelinePoint] {
        &self.points
    }

    /// Every allocation and free seen.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Where each phase starts, in order; the first starts at event 0.
    pub fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// The timeline as CSV (see [`csv`]).
    pub fn csv(&self, outside_allocator: u64) -> String {
        csv(&self.points, &self.spans, outside_allocator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_keeps_its_maxima_in_bounded_points() {
        let mut t = Timeline::new();
        let n = 100_000u64;
        // A saw tooth with one spike.
        for i in 0..n {
            let v = if i == 77_777 {
                1 << 40
            } else {
                (i % 1000) * 10
            };
            t.observe(Op::default(), v, v + 5);
        }
        assert!(t.points().len() <= MAX_POINTS);
        assert_eq!(t.events(), n);
        let covered: u64 = t.points().iter().map(|p| p.events).sum();
        assert_eq!(covered, n);
        let top = t.points().iter().map(|p| p.allocated).max().unwrap();
        assert_eq!(top, 1 << 40);
        // Points are in order and contiguous.
        for pair in t.points().windows(2) {
            assert_eq!(pair[0].first_event + pair[0].events, pair[1].first_event);
        }
    }

    /// The tensors take the most memory at one op; a later op frees most of
    /// them and then grows reserved memory by a small segment: the peak is
    /// the earlier op's (the estimate's peak moment), however the events
    /// fall into points.
    #[test]
    fn the_peak_is_the_highest_allocated_moment_not_the_last_growth() {
        let op = |layer| Op {
            layer: Some(layer),
            ..Op::default()
        };
        for before in [0u64, 1, 5_000] {
            let mut t = Timeline::new();
            for _ in 0..before {
                t.observe(op(0), 10, 20);
            }
            t.observe(op(1), 50, 100);
            t.observe(op(2), 80, 100); // the tensors at their most
            t.observe(op(5), 80, 100); // as much again: the first counts
            t.observe(op(3), 30, 100);
            t.observe(op(4), 32, 102); // a small segment: reserved's peak
            let points = t.points();
            let peak = &points[peak_index(points).unwrap()];
            assert_eq!((peak.op.layer, peak.allocated), (Some(2), 80), "{before}");
            let reserved = points.iter().map(|p| p.reserved).max();
            assert_eq!(reserved, Some(102), "{before}");
        }
    }

    #[test]
    fn the_csv_has_a_row_per_point_with_its_phase_quoted() {
        let mut t = Timeline::new();
        let op = |name: &'static str, step: Option<u32>| Op {
            name,
            step,
            step_kind: "step",
            ..Op::default()
        };
        t.observe(op("load weights", None), 10, 20);
        t.observe(op("attention \"q\"", Some(0)), 30, 40);
        t.observe(op("backward", Some(0)), 5, 40);
        let text = t.csv(100);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(lines[1], "0,1,\"load\",,,\"load weights\",10,20,120");
        assert_eq!(
            lines[2],
            "1,1,\"forward, step 1\",1,,\"attention \"\"q\"\"\",30,40,140"
        );
        assert_eq!(
            lines[3],
            "2,1,\"backward, step 1\",1,,\"backward\",5,40,140"
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn a_recycle_is_labelled_as_one() {
        let span = Span {
            first_event: 0,
            phase: Phase::Forward,
            step: Some(1),
            step_kind: "recycle",
        };
        assert_eq!(span.label(), "recycle 2");
        assert_eq!(span_at(&[span], 5), Some(&span));
        assert_eq!(
            span_at(
                &[Span {
                    first_event: 9,
                    ..span
                }],
                5
            ),
            None
        );
    }

    #[test]
    fn a_short_run_keeps_every_event() {
        let mut t = Timeline::new();
        for i in 0..10u64 {
            t.observe(Op::default(), i, 2 * i);
        }
        assert_eq!(t.points().len(), 10);
        assert_eq!(t.points()[9].reserved, 18);
    }
}
