//! The error summary that `check` and `fit` print as their last line.

use std::fmt;

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
        let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_format_and_percentiles() {
        let s = Summary::of(&[0.01, -0.02, 0.03, -0.06, 0.10]);
        assert_eq!(
            s.to_string(),
            "cases=5 median_abs_err=3.0% p90_abs_err=10.0% max_abs_err=10.0% under_5pct=1"
        );
        let even = Summary::of(&[0.01, 0.02, 0.03, 0.04]);
        assert!((even.median_abs_err - 0.025).abs() < 1e-12);
        assert_eq!(even.p90_abs_err, 0.04);
        assert_eq!(
            Summary::of(&[]).to_string(),
            "cases=0 median_abs_err=0.0% p90_abs_err=0.0% max_abs_err=0.0% under_5pct=0"
        );
    }

    #[test]
    fn p90_is_nearest_rank() {
        let errors: Vec<f64> = (1..=20).map(|i| i as f64 / 100.0).collect();
        assert_eq!(Summary::of(&errors).p90_abs_err, 0.18);
    }
}
