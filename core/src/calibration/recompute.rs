//! A profile's accuracy claims recomputed from its points: the error
//! summaries before and after the fit, each point's predictions, the fit's
//! point count and the spread of its residuals.

use super::points::{driver_peak, reserved_peak};
use super::{field_err, FitInfo, Profile, ProfileError, SummaryPair};
use crate::estimate::estimate;
use crate::families;
use crate::readers::Spec;
use crate::runtime::RuntimeProfile;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde_json::{json, Value};

/// Summary of relative errors `(predicted - measured) / measured` of the
/// driver-level peak over a set of cases.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    /// Cases in the summary (skipped cases are not).
    pub cases: usize,
    /// Median of |error|, as a fraction.
    pub median_abs_err: f64,
    /// 90th percentile of |error| (nearest rank), as a fraction.
    pub p90_abs_err: f64,
    /// Largest |error|, as a fraction.
    pub max_abs_err: f64,
    /// Cases predicted more than 5% below the measurement.
    pub under_5pct: usize,
}

impl Summary {
    /// Summarises signed relative errors (fractions, not percent).
    pub fn of(errors: &[f64]) -> Summary {
        let mut abs: Vec<f64> = errors.iter().map(|e| libm::fabs(*e)).collect();
        abs.sort_by(f64::total_cmp);
        let n = abs.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => abs[n / 2],
            _ => (abs[n / 2 - 1] + abs[n / 2]) / 2.0,
        };
        // Nearest rank: the smallest value with at least 90% of cases at or below it.
        let p90 = if n == 0 {
            0.0
        } else {
            abs[(9 * n).div_ceil(10).max(1) - 1]
        };
        Summary {
            cases: n,
            median_abs_err: median,
            p90_abs_err: p90,
            max_abs_err: abs.last().copied().unwrap_or(0.0),
            under_5pct: errors.iter().filter(|&&e| e < -0.05).count(),
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cases={} median_abs_err={:.1}% p90_abs_err={:.1}% max_abs_err={:.1}% under_5pct={}",
            self.cases,
            self.median_abs_err * 100.0,
            self.p90_abs_err * 100.0,
            self.max_abs_err * 100.0,
            self.under_5pct
        )
    }
}

/// Signed relative error of a prediction.
pub fn relative_error(predicted: u64, measured: u64) -> f64 {
    (predicted as f64 - measured as f64) / measured as f64
}

/// A profile's claims as its points and the core give them.
#[derive(Clone, Debug, PartialEq)]
pub struct Recomputed {
    /// Error summaries before and after the fit.
    pub summary: SummaryPair,
    /// The fit, with `points_used` and `residual_std_bytes` recomputed
    /// (`basis` and `points_skipped`, which the points cannot tell, as
    /// claimed).
    pub fit: FitInfo,
    /// Each point's `prediction`, in point order.
    pub predictions: Vec<Value>,
}

impl Recomputed {
    /// The claims of `profile` that differ from these, as field paths
    /// (`summary.after.median_abs_err`, `points[3].prediction`).
    pub fn differences(&self, profile: &Profile) -> Vec<String> {
        let mut out = Vec::new();
        let close = |a: f64, b: f64| libm::fabs(a - b) <= 1e-6;
        for (label, claimed, ours) in [
            (
                "summary.before",
                &profile.summary.before,
                &self.summary.before,
            ),
            ("summary.after", &profile.summary.after, &self.summary.after),
        ] {
            if claimed.cases != ours.cases {
                out.push(format!("{label}.cases"));
            }
            for (name, a, b) in [
                (
                    "median_abs_err",
                    claimed.median_abs_err,
                    ours.median_abs_err,
                ),
                ("p90_abs_err", claimed.p90_abs_err, ours.p90_abs_err),
                ("max_abs_err", claimed.max_abs_err, ours.max_abs_err),
            ] {
                if !close(a, b) {
                    out.push(format!("{label}.{name}"));
                }
            }
            if claimed.under_5pct != ours.under_5pct {
                out.push(format!("{label}.under_5pct"));
            }
        }
        if profile.fit.points_used != self.fit.points_used {
            out.push("fit.points_used".into());
        }
        if profile.fit.residual_std_bytes != self.fit.residual_std_bytes {
            out.push("fit.residual_std_bytes".into());
        }
        for (i, (point, ours)) in profile.points.iter().zip(&self.predictions).enumerate() {
            let claimed = point.get("prediction");
            let same = claimed.is_some_and(|c| {
                ["before", "after"]
                    .iter()
                    .all(|k| c.get(*k).and_then(Value::as_u64) == ours[*k].as_u64())
                    && ["error_before", "error_after"].iter().all(|k| {
                        match (c.get(*k).and_then(Value::as_f64), ours[*k].as_f64()) {
                            (Some(a), Some(b)) => close(a, b),
                            _ => false,
                        }
                    })
            });
            if !same {
                out.push(format!("points[{i}].prediction"));
            }
        }
        out
    }

    /// `profile` with these figures in place of its own.
    pub fn apply_to(&self, profile: &mut Profile) {
        profile.summary = self.summary.clone();
        profile.fit = self.fit.clone();
        for (point, prediction) in profile.points.iter_mut().zip(&self.predictions) {
            if let Value::Object(map) = point {
                map.insert("prediction".to_string(), prediction.clone());
            }
        }
    }
}

/// `profile`'s coefficients on `base`'s allocator settings (what `fit` and
/// `check --profile` estimate a point with).
pub fn apply_profile(base: &RuntimeProfile, profile: &RuntimeProfile) -> RuntimeProfile {
    RuntimeProfile {
        allocator: base.allocator,
        ..profile.clone()
    }
}

/// Recomputes `profile`'s claims from its points, as `headroom fit` computes
/// them: each point estimated with the runtime of the first point (before)
/// and with the profile's runtime (after), against its measured driver
/// peak. The residual spread is the fitted runtime's: a point's measured
/// driver peak minus its reserved peak (torch's measured one on the
/// `torch_reserved` basis, the core's predicted one on `predicted_reserved`,
/// weighted by 1/measured^2) minus the profile's bytes outside the allocator.
///
/// A profile without points, or with a point the core cannot estimate, is
/// refused naming the field.
pub fn recompute(profile: &Profile) -> Result<Recomputed, ProfileError> {
    if profile.points.is_empty() {
        return Err(field_err(
            "points",
            format!(
                "is empty, so nothing supports `summary.after.cases` ({}) or the fit",
                profile.summary.after.cases
            ),
            "the measured points the profile was fitted on (at least 1)",
        ));
    }
    let spec_of = |i: usize, point: &Value| {
        Spec::from_value(point).map_err(|e| {
            field_err(
                &format!("points[{i}]"),
                format!("the core cannot read it: {e}"),
                "a measurement case of a preset model",
            )
        })
    };
    let prior = spec_of(0, &profile.points[0])?.runtime;
    let torch_basis = profile.fit.basis == "torch_reserved";
    let mut errors_before = Vec::new();
    let mut errors_after = Vec::new();
    let mut predictions = Vec::new();
    let mut residuals = Vec::new();
    let (mut any_training, mut any_inference, mut any_cudnn, mut any_other) =
        (false, false, false, false);
    for (i, point) in profile.points.iter().enumerate() {
        let spec = spec_of(i, point)?;
        let estimate_with = |runtime: &RuntimeProfile| {
            estimate(
                &spec.model.arch,
                &spec.workload,
                &apply_profile(&spec.runtime, runtime),
            )
            .map_err(|e| {
                field_err(
                    &format!("points[{i}]"),
                    format!("the core cannot estimate it: {e}"),
                    "a measurement case the core models",
                )
            })
        };
        let before = estimate_with(&prior)?.driver_peak.0;
        let after_estimate = estimate_with(&profile.runtime)?;
        let after = after_estimate.driver_peak.0;
        let outside = after_estimate.outside_allocator.0;
        let measured = driver_peak(point);
        let error_before = relative_error(before, measured);
        let error_after = relative_error(after, measured);
        errors_before.push(error_before);
        errors_after.push(error_after);
        let round = |e: f64| libm::round(e * 1e5) / 1e5;
        predictions.push(json!({
            "before": before,
            "after": after,
            "error_before": round(error_before),
            "error_after": round(error_after),
        }));
        let (reserved, weight) = match (torch_basis, reserved_peak(point)) {
            (true, Some(r)) => (r, 1.0),
            (true, None) => {
                return Err(field_err(
                    &format!("points[{i}].measured.reserved_peak"),
                    "is missing on the `torch_reserved` basis",
                    "torch's reserved peak, bytes, on every point of a `torch_reserved` fit",
                ))
            }
            (false, _) => (after.saturating_sub(outside), {
                let w = 1e9 / measured as f64;
                w * w
            }),
        };
        residuals.push((measured as f64 - reserved as f64 - outside as f64, weight));
        let libs = families::libraries(&spec.model.arch, &spec.workload, &spec.runtime);
        any_training |= libs.backward;
        any_inference |= !libs.backward;
        any_cudnn |= libs.cudnn;
        any_other |= !libs.cudnn;
    }
    // The fit's columns: the inference overhead always, backward and cuDNN
    // when the points tell them apart.
    let columns =
        1 + usize::from(any_training && any_inference) + usize::from(any_cudnn && any_other);
    let n = residuals.len();
    let mean_weight = residuals.iter().map(|(_, w)| w).sum::<f64>() / n as f64;
    let rss: f64 = residuals.iter().map(|(r, w)| w / mean_weight * r * r).sum();
    let residual_std = if n > columns {
        libm::sqrt(rss / (n - columns) as f64)
    } else {
        0.0
    };
    Ok(Recomputed {
        summary: SummaryPair {
            before: Summary::of(&errors_before),
            after: Summary::of(&errors_after),
        },
        fit: FitInfo {
            basis: profile.fit.basis.clone(),
            points_used: n,
            points_skipped: profile.fit.points_skipped,
            residual_std_bytes: libm::round(residual_std) as u64,
        },
        predictions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibration::{parse, Identity};

    fn committed() -> Profile {
        parse(
            include_str!("../../../calibration/profiles/h100-2026-12-07.json"),
            &Identity::default(),
        )
        .expect("the committed H100 profile reads")
    }

    #[test]
    fn recomputed_claims_agree_with_themselves_and_name_a_doctored_one() {
        let mut p = committed();
        let ours = recompute(&p).unwrap();
        ours.apply_to(&mut p);
        assert!(ours.differences(&p).is_empty());
        assert_eq!(ours.fit.points_used, p.points.len());
        assert_eq!(ours.summary.after.cases, p.points.len());

        let mut doctored = p.clone();
        doctored.summary.after.median_abs_err += 0.01;
        doctored.fit.residual_std_bytes += 1;
        assert_eq!(
            ours.differences(&doctored),
            ["summary.after.median_abs_err", "fit.residual_std_bytes"]
        );
    }

    #[test]
    fn a_profile_without_points_is_refused_naming_them() {
        let mut p = committed();
        p.points.clear();
        let e = recompute(&p).unwrap_err();
        assert_eq!(e.field(), "points");
        assert!(e.to_string().contains("summary.after.cases"), "{e}");
    }
}
