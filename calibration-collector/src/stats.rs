//! The error summary that `check` and `fit` print as their last line: the
//! core's (`headroom_core::calibration::Summary`), which the registry
//! recomputes a profile's claims with.

pub use headroom_core::calibration::{relative_error, Summary};

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
