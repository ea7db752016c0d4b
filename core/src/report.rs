//! The estimate as the front ends report it: one JSON document, the same
//! from the command line (`headroom estimate`, which prints it) and from
//! Python (`headroom.estimate(...).to_json()`), byte for byte.
//!
//! The document is the [`Estimate`]'s fields, the model and the inputs
//! echoed, the likely range ([`likely_range`]), the card it was estimated
//! for, and, without a card, what an estimate on no card means for a job
//! too large for every card ([`NoCard`]).

use crate::bytes::Bytes;
use crate::error::Error;
use crate::estimate::{estimate_with, Estimate, EstimateOptions};
use crate::gpus::{self, Gpu};
use crate::readers::Spec;
use crate::uncertainty::{likely_range, unmeasured_note, LikelyRange};
use alloc::format;
use alloc::string::String;
use serde_json::{json, Value};

/// What an estimate without a card means when its figures pass every card.
/// Without a card the replay's allocator never runs out, so it never
/// releases its cache: a job of many growing allocations (a million decode
/// steps) ends up "reserving" terabytes no card has, though it runs on one.
#[derive(Clone, Debug)]
pub enum NoCard {
    /// The job fits the largest card of the catalog, where the allocator
    /// releases its cache as it runs out: `bounded` is the estimate there.
    OnLargest {
        /// The largest card.
        card: &'static Gpu,
        /// The estimate on it.
        bounded: Estimate,
        /// The driver-level peak of a card of unlimited size.
        unlimited_driver_peak: u64,
    },
    /// The job runs out of memory even on the largest card: the figures
    /// are those of a card of unlimited size.
    FitsNoCard {
        /// The largest card.
        card: &'static Gpu,
    },
}

impl NoCard {
    /// The note in words (the table's `note` line, the JSON's `note`).
    pub fn note(&self) -> String {
        match self {
            NoCard::OnLargest {
                card,
                unlimited_driver_peak,
                ..
            } => format!(
                "no --gpu given: on a card of unlimited size the driver-level peak would be {:.1} GB, mostly cache the allocator never had to release; the figures above are on the largest card of the catalog, {} ({:.2} GB usable), where the allocator releases its cache when it runs out; `gpus` lists the smaller cards the job fits",
                Bytes(*unlimited_driver_peak).as_gb(),
                card.name,
                Bytes(card.usable_bytes).as_gb()
            ),
            NoCard::FitsNoCard { card } => format!(
                "does not fit any single card of the catalog: it runs out of memory even on the largest, {} ({:.2} GB usable); the figures above are a card of unlimited size's, which never releases its cache; spread it over several GPUs (--strategy, --world-size) or shrink it",
                card.name,
                Bytes(card.usable_bytes).as_gb()
            ),
        }
    }

    /// The JSON form (`without_a_card`).
    pub fn to_json(&self) -> Value {
        match self {
            NoCard::OnLargest {
                card,
                unlimited_driver_peak,
                ..
            } => json!({
                "estimated_on": {"id": card.id, "name": card.name, "usable_bytes": card.usable_bytes},
                "unlimited_card_driver_peak": unlimited_driver_peak,
                "note": self.note(),
            }),
            NoCard::FitsNoCard { card } => json!({
                "fits_any_card": false,
                "largest_card": {"id": card.id, "name": card.name, "usable_bytes": card.usable_bytes},
                "note": self.note(),
            }),
        }
    }

    /// The largest card of the catalog, which an estimate without a card
    /// falls back to.
    pub fn largest_card() -> &'static Gpu {
        gpus::CATALOG
            .iter()
            .max_by_key(|g| g.usable_bytes)
            .expect("the catalog lists cards")
    }
}

/// For an estimate made without a card: `None` when its driver-level peak
/// fits the largest card of the catalog (then every card large enough
/// shows the same figures), else the estimate on that card, made by
/// `on_card(usable bytes)`.
pub fn without_a_card<E>(
    unlimited: &Estimate,
    on_card: impl Fn(u64) -> Result<Estimate, E>,
) -> Result<Option<NoCard>, E> {
    let card = NoCard::largest_card();
    if unlimited.driver_peak.0 <= card.usable_bytes {
        return Ok(None);
    }
    let bounded = on_card(card.usable_bytes)?;
    Ok(Some(if bounded.fits {
        NoCard::OnLargest {
            card,
            bounded,
            unlimited_driver_peak: unlimited.driver_peak.0,
        }
    } else {
        NoCard::FitsNoCard { card }
    }))
}

/// Whether the overheads of the card an estimate is for were measured
/// ([`gpus::overheads_measured`]: the H200's and the H100's); without a
/// card, the runtime's own (measured) figures apply.
pub fn card_is_measured(gpu: Option<&Gpu>) -> bool {
    gpu.is_none_or(gpus::overheads_measured)
}

/// The likely range of `est` for `spec` on `gpu` (or on the runtime's own
/// card when `None`).
pub fn range_for(spec: &Spec, est: &Estimate, gpu: Option<&Gpu>) -> LikelyRange {
    likely_range(
        &spec.model.arch,
        &spec.workload,
        est.driver_peak,
        est.outside_allocator,
        card_is_measured(gpu),
    )
}

/// The estimate's fields, plus the model and the inputs echoed, and the
/// card when there is one (else the estimate's `fits`, which means
/// nothing without a capacity, is left out).
pub fn estimate_json(spec: &Spec, est: &Estimate, gpu: Option<&Gpu>) -> Value {
    let mut value = serde_json::to_value(est).expect("estimate serialises");
    let map = value.as_object_mut().expect("estimate is an object");
    map.insert(
        "model".into(),
        json!({
            "id": spec.model.id,
            "name": spec.model.name,
            "family": spec.model.arch.family(),
        }),
    );
    map.insert(
        "inputs".into(),
        json!({ "workload": spec.workload, "runtime": spec.runtime }),
    );
    if let Some(g) = gpu {
        map.insert(
            "gpu".into(),
            json!({ "id": g.id, "name": g.name, "usable_bytes": g.usable_bytes }),
        );
    } else {
        map.remove("fits");
    }
    value
}

/// The likely range as JSON (`likely_range`).
pub fn range_json(range: &LikelyRange) -> Value {
    json!({
        "low": range.low.0,
        "high": range.high.0,
        "cases": range.band.cases,
        "family": range.band.family,
        "mode": range.band.mode.key(),
        "strategy": range.band.strategy.key(),
        "lowest_error": range.band.lowest,
        "highest_error": range.band.highest,
        "card_measured": range.card_measured,
        "unmeasured": unmeasured_note(&range.band),
    })
}

/// An estimate as the front ends report it: on a card, or without one
/// (then on the largest card when the job passes it, [`NoCard`]), with
/// its likely range.
#[derive(Clone, Debug)]
pub struct Report {
    /// The estimate reported: on the card, on no card, or the bounded one
    /// of [`NoCard::OnLargest`].
    pub estimate: Estimate,
    /// Its likely range ([`range_for`]).
    pub range: LikelyRange,
    /// The card it is for, if one was named.
    pub gpu: Option<&'static Gpu>,
    /// Without a card, what the figures mean for a job that passes the
    /// largest card.
    pub no_card: Option<NoCard>,
}

impl Report {
    /// The report of `spec` on `gpu` (or on no card), each estimate made
    /// by `estimate_on(capacity)`: a capacity in usable bytes, `None` for
    /// a card of unlimited size. The command line passes its own (a
    /// progress line, jobs earlier in the process).
    pub fn new<E>(
        spec: &Spec,
        gpu: Option<&'static Gpu>,
        estimate_on: impl Fn(Option<u64>) -> Result<Estimate, E>,
    ) -> Result<Report, E> {
        let mut estimate = estimate_on(gpu.map(|g| g.usable_bytes))?;
        let mut no_card = None;
        if gpu.is_none() {
            no_card = without_a_card(&estimate, |capacity| estimate_on(Some(capacity)))?;
            if let Some(NoCard::OnLargest { bounded, .. }) = &no_card {
                estimate = bounded.clone();
            }
        }
        let range = range_for(spec, &estimate, gpu);
        Ok(Report {
            estimate,
            range,
            gpu,
            no_card,
        })
    }

    /// The report of `spec` on `gpu` (or on no card), by
    /// [`estimate_with`](crate::estimate::estimate_with).
    pub fn of(spec: &Spec, gpu: Option<&'static Gpu>) -> Result<Report, Error> {
        Report::new(spec, gpu, |capacity| {
            estimate_with(
                &spec.model.arch,
                &spec.workload,
                &spec.runtime,
                EstimateOptions {
                    capacity,
                    ..EstimateOptions::default()
                },
            )
        })
    }

    /// The capacity the report's estimate was made on: the card's, the
    /// largest card's for [`NoCard::OnLargest`], else `None` (unlimited).
    pub fn capacity(&self) -> Option<u64> {
        match (&self.no_card, self.gpu) {
            (Some(NoCard::OnLargest { card, .. }), _) => Some(card.usable_bytes),
            (_, gpu) => gpu.map(|g| g.usable_bytes),
        }
    }

    /// Whether the job fits the card named, its likely range's high end
    /// included (`None` without a card).
    pub fn fits(&self) -> Option<bool> {
        self.gpu
            .map(|g| self.estimate.fits && self.range.high.0 <= g.usable_bytes)
    }

    /// The whole document: [`estimate_json`], its `likely_range` (with
    /// `fits` on a card, [`Report::fits`]) and, without a card,
    /// `without_a_card` when the job passes the largest card.
    pub fn to_json(&self, spec: &Spec) -> Value {
        let mut value = estimate_json(spec, &self.estimate, self.gpu);
        value["likely_range"] = range_json(&self.range);
        if let Some(fits) = self.fits() {
            value["likely_range"]["fits"] = json!(fits);
        }
        if let Some(no_card) = &self.no_card {
            value["without_a_card"] = no_card.to_json();
        }
        value
    }

    /// [`Report::to_json`] as the command line prints it: pretty JSON and
    /// a newline.
    pub fn to_json_text(&self, spec: &Spec) -> String {
        serde_json::to_string_pretty(&self.to_json(spec)).expect("the report serialises") + "\n"
    }
}
