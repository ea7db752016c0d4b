//! Memory over the job at the chosen length: the core's timeline
//! (`estimate_with_timeline`), its phases as labelled bands, its peak, the
//! chart's scales and the CSV export. Only unit conversion happens here.
//!
//! The feature's files: this one (native, tested natively), `panel.rs`
//! (the page's own module) and `body.rs` (the panels module).

/// The timeline as the panels module draws it, with its exports.
#[cfg(target_arch = "wasm32")]
pub mod body;
/// The panel on the page: its toggle and the container the panels module fills.
#[cfg(target_arch = "wasm32")]
pub mod panel;

use headroom_core::arch::Architecture;
use headroom_core::estimate::{estimate_with_timeline, Estimate, EstimateOptions};
use headroom_core::timeline::{Span, TimelinePoint};
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use std::fmt::Write;

/// A job's memory over its allocations and frees, with the estimate it
/// comes with.
#[derive(Clone, Debug, PartialEq)]
pub struct JobTimeline {
    /// The estimate at this length (its peak is the timeline's highest).
    pub estimate: Estimate,
    /// The points, in order: each the highest of its run of events.
    pub points: Vec<TimelinePoint>,
    /// Where each phase starts.
    pub spans: Vec<Span>,
    /// Every allocation and free of the replay.
    pub events: u64,
}

/// A shaded band of the chart: a phase from one event to the next phase.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    /// Its first event.
    pub from: u64,
    /// The event after its last.
    pub to: u64,
    /// Its label: the phase, and the step or recycle (`forward, step 1`).
    pub label: String,
}

impl JobTimeline {
    /// The timeline of `workload` (at its own length) on `arch`.
    pub fn compute(
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
    ) -> Result<JobTimeline, String> {
        let (estimate, timeline) =
            estimate_with_timeline(arch, workload, runtime, EstimateOptions::default())
                .map_err(|e| e.to_string())?;
        Ok(JobTimeline {
            estimate,
            points: timeline.points().to_vec(),
            spans: timeline.spans().to_vec(),
            events: timeline.events(),
        })
    }

    /// The index of the peak: the point of the estimate's peak moment.
    pub fn peak_index(&self) -> Option<usize> {
        headroom_core::timeline::peak_index(&self.points)
    }

    /// The phases as bands over the events, in order.
    pub fn bands(&self) -> Vec<Band> {
        self.spans
            .iter()
            .enumerate()
            .map(|(i, span)| Band {
                from: span.first_event,
                to: self
                    .spans
                    .get(i + 1)
                    .map_or(self.events, |next| next.first_event),
                label: span.label(),
            })
            .collect()
    }

    /// The label of the phase of the event `event`.
    pub fn phase_at(&self, event: u64) -> String {
        headroom_core::timeline::span_at(&self.spans, event).map_or(String::new(), Span::label)
    }

    /// The timeline as CSV: one row per point, its phase and the op of its
    /// highest reserved bytes quoted (the core's `timeline::csv`, as the
    /// collector's `--timeline` writes it).
    pub fn csv(&self) -> String {
        headroom_core::timeline::csv(&self.points, &self.spans, self.estimate.outside_allocator.0)
    }
}

/// An op as the chart's tooltip names it: its name, layer and step.
pub fn op_label(op: &headroom_core::trace::Op) -> String {
    let mut text = op.name.to_string();
    if let Some(layer) = op.layer {
        let _ = write!(text, " (layer {layer})");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::presets;
    use headroom_core::workload::Mode;

    fn llama_training() -> JobTimeline {
        let p = presets::find("llama-3.2-1b").unwrap();
        let mut w = crate::state::AppState::for_model(p.model()).workload;
        w.mode = Mode::Training;
        w.seq_len = 512;
        JobTimeline::compute(&p.arch, &w, &RuntimeProfile::h200()).unwrap()
    }

    /// The peak is the estimate's, the bands cover the job in order, and
    /// the CSV holds one row per point with its phase.
    #[test]
    fn a_training_timeline_has_its_peak_bands_and_csv() {
        let t = llama_training();
        let peak = &t.points[t.peak_index().unwrap()];
        assert_eq!(peak.allocated, t.estimate.allocated_peak.0);
        let reserved = t.points.iter().map(|p| p.reserved).max();
        assert_eq!(reserved, Some(t.estimate.reserved_peak.0));
        let bands = t.bands();
        assert_eq!(bands[0].from, 0);
        assert_eq!(bands.last().unwrap().to, t.events);
        assert!(bands.windows(2).all(|b| b[0].to == b[1].from));
        let labels: Vec<&str> = bands.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            &labels[..4],
            &[
                "load",
                "forward, step 1",
                "backward, step 1",
                "optimizer, step 1"
            ]
        );
        let csv = t.csv();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), 1 + t.points.len());
        assert!(rows[1].starts_with("0,"), "{}", rows[1]);
        assert!(
            rows[1].starts_with("0,") && rows[1].contains(",\"load\","),
            "{}",
            rows[1]
        );
        let top: u64 = rows[1..]
            .iter()
            .map(|r| r.rsplit(',').nth(1).unwrap().parse::<u64>().unwrap())
            .max()
            .unwrap();
        assert_eq!(top, t.estimate.reserved_peak.0);
    }

    #[test]
    fn a_fold_labels_its_recycles() {
        let p = presets::find("esmfold-v1").unwrap();
        let w = crate::state::AppState::for_model(p.model()).workload;
        let t = JobTimeline::compute(&p.arch, &w, &RuntimeProfile::h200()).unwrap();
        let labels: Vec<String> = t.bands().into_iter().map(|b| b.label).collect();
        assert!(labels.contains(&"recycle 1".to_string()), "{labels:?}");
        assert!(labels.contains(&"recycle 2".to_string()), "{labels:?}");
        assert!(!labels.contains(&"recycle 0".to_string()), "{labels:?}");
    }
}
