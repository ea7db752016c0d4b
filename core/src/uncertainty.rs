//! How far an estimate is likely to be from what the job will show: the
//! errors measured for jobs of its family and mode, as a range of bytes.
//!
//! Every committed H200 measurement set that `docs/accuracy.md` reports is
//! checked against the model; the lowest and highest error of each family,
//! mode and several-GPU strategy are kept in [`MEASURED_BANDS`], a table
//! `scripts/error-bands.sh` writes from those files (a test fails when it
//! drifts from them). An estimate's range is its prediction divided by
//! `1 + error` at both ends: a measured peak `m` was predicted as
//! `m * (1 + error)`.
//!
//! On a card whose overheads were not measured (every card but the H200),
//! what lives outside the allocator is uncertain too: the CUDA context
//! alone is 651 MB on the H200 with torch 2.11 and was 287 MB in PyTorch's
//! own report (lazy loading, PR #86509), so such a range is widened by
//! [`UNMEASURED_CARD_OUTSIDE_SHARE`] of the outside-allocator bytes on
//! each side.

use crate::arch::Architecture;
use crate::bytes::Bytes;
use crate::parallel::Strategy;
use crate::workload::{MemoryFormat, Mode, Workload};

mod measured;
pub use measured::MEASURED_BANDS;

/// The errors measured for one kind of job.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ErrorBand {
    /// The family key (`decoder`, `encoder`, `vit`, `esm_fold`, `cnn`,
    /// `cnn_channels_last`: [`band_family`]), or `"any"` for the band over
    /// every case.
    pub family: &'static str,
    /// Inference or training.
    pub mode: Mode,
    /// How the job was spread over GPUs.
    pub strategy: Strategy,
    /// Measured cases behind the band.
    pub cases: u32,
    /// Lowest `(predicted - measured) / measured` among them.
    pub lowest: f64,
    /// Highest error among them.
    pub highest: f64,
}

/// Each end of a range is at least this far from the prediction (1%): a
/// band measured on a few close cases does not claim more than the
/// measurements' own repeatability.
pub const MIN_ERROR: f64 = 0.01;

/// Share of the outside-allocator bytes a card whose overheads were not
/// measured may differ by, each way (see the module documentation).
pub const UNMEASURED_CARD_OUTSIDE_SHARE: f64 = 0.5;

/// The likely range of a driver-level peak.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LikelyRange {
    /// The low end.
    pub low: Bytes,
    /// The high end: what "fits" should be decided from.
    pub high: Bytes,
    /// The measured errors it comes from.
    pub band: ErrorBand,
    /// Whether the card's own overheads were measured (else the range is
    /// widened for them).
    pub card_measured: bool,
}

/// The family key of a job's band: its architecture's family, except a
/// convolutional network in `channels_last`, whose errors are another
/// population (`cnn_channels_last`: without layout copies its blocks are
/// its tensors; measured within 0.6%, where NCHW training spans -7% to
/// +3.6%, `measurements/channels-last/`).
///
/// Jobs whose weights bitsandbytes quantized are [`QUANTIZED_FAMILY`]:
/// their layers dequantize per call and their optimizers are
/// bitsandbytes', another population again.
pub fn band_family(arch: &Architecture, workload: &Workload) -> &'static str {
    match arch {
        _ if !workload.dtype.is_float() => QUANTIZED_FAMILY,
        Architecture::Cnn(_) if workload.memory_format == MemoryFormat::ChannelsLast => {
            "cnn_channels_last"
        }
        _ => arch.family(),
    }
}

/// The family key of jobs whose weights bitsandbytes stores quantized
/// (`dtype` int8, int4 or int4_dq).
pub const QUANTIZED_FAMILY: &str = "quantized";

/// Why a band says little, in words: a band without measurements (a
/// mode no committed file covers); `None` for a measured band.
pub fn unmeasured_note(band: &ErrorBand) -> Option<&'static str> {
    (band.cases == 0).then_some(
        "no job of this kind was measured: the range is the least error any estimate carries",
    )
}

/// The band for a job: its family ([`band_family`]), mode and strategy; a
/// strategy without measurements falls back to one GPU's band of the
/// family and mode, and a family and mode without any to the band over
/// every case.
pub fn band_for(arch: &Architecture, workload: &Workload) -> ErrorBand {
    let family = band_family(arch, workload);
    let find = |strategy: Strategy| {
        MEASURED_BANDS
            .iter()
            .find(|b| b.family == family && b.mode == workload.mode && b.strategy == strategy)
    };
    find(workload.parallel.strategy)
        .or_else(|| find(Strategy::None))
        .or_else(|| {
            MEASURED_BANDS
                .iter()
                .find(|b| b.family == "any" && b.mode == workload.mode)
        })
        .copied()
        .unwrap_or(ErrorBand {
            family: "any",
            mode: workload.mode,
            strategy: Strategy::None,
            cases: 0,
            lowest: -MIN_ERROR,
            highest: MIN_ERROR,
        })
}

/// The likely range of a predicted driver-level peak `predicted`, with
/// `outside` bytes outside the allocator, for a job of `arch` and
/// `workload`; `card_measured` says whether the card's overheads were
/// measured.
pub fn likely_range(
    arch: &Architecture,
    workload: &Workload,
    predicted: Bytes,
    outside: Bytes,
    card_measured: bool,
) -> LikelyRange {
    let band = band_for(arch, workload);
    range_of(band, predicted, outside, card_measured)
}

/// [`likely_range`] with its band given.
pub fn range_of(
    band: ErrorBand,
    predicted: Bytes,
    outside: Bytes,
    card_measured: bool,
) -> LikelyRange {
    let p = predicted.0 as f64;
    let highest = band.highest.max(MIN_ERROR);
    let lowest = band.lowest.clamp(-0.99, -MIN_ERROR);
    let widen = if card_measured {
        0.0
    } else {
        outside.0 as f64 * UNMEASURED_CARD_OUTSIDE_SHARE
    };
    let low = (p / (1.0 + highest) - widen).max(0.0);
    let high = p / (1.0 + lowest) + widen;
    LikelyRange {
        low: Bytes(low as u64),
        high: Bytes(high.min(u64::MAX as f64) as u64),
        band,
        card_measured,
    }
}

impl LikelyRange {
    /// Whether a measured peak lies in the range.
    pub fn contains(&self, measured: u64) -> bool {
        self.low.0 <= measured && measured <= self.high.0
    }

    /// Half the range's width against the prediction it was made from.
    pub fn half_width(&self, predicted: Bytes) -> f64 {
        (self.high.0 - self.low.0) as f64 / 2.0 / (predicted.0.max(1) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn band(lowest: f64, highest: f64) -> ErrorBand {
        ErrorBand {
            family: "decoder",
            mode: Mode::Training,
            strategy: Strategy::None,
            cases: 3,
            lowest,
            highest,
        }
    }

    #[test]
    fn a_range_holds_every_measurement_its_band_came_from() {
        // Measured peaks of 100 predicted as 96 (-4%) and 103 (+3%).
        let b = band(-0.04, 0.03);
        for (predicted, measured) in [(96u64, 100u64), (103, 100)] {
            let r = range_of(b, Bytes(predicted * 1_000_000), Bytes(0), true);
            assert!(r.contains(measured * 1_000_000), "{r:?}");
        }
    }

    #[test]
    fn narrow_bands_are_widened_to_the_floor_and_unmeasured_cards_further() {
        let r = range_of(band(0.0, 0.0), Bytes(1_000_000_000), Bytes(0), true);
        assert_eq!(r.low, Bytes((1e9 / 1.01) as u64));
        assert_eq!(r.high, Bytes((1e9 / 0.99) as u64));
        let wider = range_of(
            band(0.0, 0.0),
            Bytes(1_000_000_000),
            Bytes(400_000_000),
            false,
        );
        assert_eq!(wider.high.0 - r.high.0, 200_000_000);
        assert_eq!(r.low.0 - wider.low.0, 200_000_000);
    }

    #[test]
    fn every_family_and_mode_has_a_band() {
        for preset in crate::presets::all() {
            for mode in Mode::ALL {
                let w = Workload {
                    mode: *mode,
                    ..Workload::default()
                };
                let b = band_for(&preset.arch, &w);
                assert!(b.cases > 0, "{} {mode:?}", preset.id);
                assert!(b.highest >= b.lowest, "{} {mode:?}", preset.id);
            }
        }
    }
}
