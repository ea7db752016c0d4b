//! Memory over the job: allocated and reserved bytes after every
//! allocation and free of a replay, reduced to at most [`MAX_POINTS`]
//! points as it runs. Each point covers a run of consecutive events and
//! keeps their highest allocated and highest reserved bytes, and the op of
//! the highest reserved, so every local maximum at the point's scale, and
//! the job's peak, are exact. When the points fill up, neighbours merge in
//! pairs and each point covers twice as many events: memory stays bounded
//! whatever the job's length.

use crate::trace::Op;
use alloc::vec::Vec;

/// Most points a timeline keeps.
pub const MAX_POINTS: usize = 1024;

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
    /// The op at the highest reserved bytes (the first such event).
    pub op: Op,
}

/// A replay's memory over time.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    points: Vec<TimelinePoint>,
    /// Events per point.
    width: u64,
    /// Events seen.
    events: u64,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline {
            points: Vec::with_capacity(MAX_POINTS),
            width: 1,
            events: 0,
        }
    }

    /// One event: the totals right after it, and the op that caused it.
    pub fn observe(&mut self, op: Op, allocated: u64, reserved: u64) {
        let event = self.events;
        self.events += 1;
        if let Some(last) = self.points.last_mut() {
            if last.events < self.width {
                last.events += 1;
                last.allocated = last.allocated.max(allocated);
                if reserved > last.reserved {
                    last.reserved = reserved;
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
                [a, b] => TimelinePoint {
                    first_event: a.first_event,
                    events: a.events + b.events,
                    allocated: a.allocated.max(b.allocated),
                    reserved: a.reserved.max(b.reserved),
                    op: if b.reserved > a.reserved { b.op } else { a.op },
                },
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
