//! Accuracy of the driver-level peak against real H200 measurements.
//!
//! The headline bounds: median absolute error at most 3%, no case worse than
//! 8%, none predicted more than 5% below its measurement (an under-estimate
//! is an out-of-memory error). Some sets are held tighter, a few known misses
//! are named, and the convolutional training sets are regression guards.
//! `docs/accuracy.md` (`scripts/accuracy-doc.sh`) shows every case.
//!
//! `table.rs` holds every bound on a measurement file (or a filtered part
//! of one) as a row; `named_cases.rs` the checks a row cannot say (named
//! cases, relations between files); `traces.rs` the replay against
//! allocation traces and cuDNN sweeps. How each figure got where it is:
//! CHANGELOG.md, "How the accuracy bounds' figures moved".

mod named_cases;
mod table;
mod traces;

use headroom_tests::{compare_file, Compared};

/// A set of cases' absolute errors (percent) and its cases more than 5%
/// under.
struct Summary {
    cases: usize,
    median: f64,
    p90: f64,
    max: f64,
    under_5pct: usize,
}

fn summarise(rows: &[&Compared]) -> Summary {
    let mut errs: Vec<f64> = rows.iter().map(|r| r.error().abs() * 100.0).collect();
    errs.sort_by(f64::total_cmp);
    // Linear interpolation between order statistics (the median of an even
    // count is the mean of the middle two).
    let pick = |q: f64| {
        let pos = (errs.len() as f64 - 1.0) * q;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        errs[lo] + (errs[hi] - errs[lo]) * (pos - lo as f64)
    };
    Summary {
        cases: rows.len(),
        median: pick(0.5),
        p90: pick(0.9),
        max: *errs.last().unwrap(),
        under_5pct: rows.iter().filter(|r| r.error() < -0.05).count(),
    }
}

fn report(rows: &[&Compared]) {
    for r in rows {
        println!(
            "{:52} pred {:>7.3} GB meas {:>7.3} GB err {:>+6.1}%  reserved {:>7.3}/{:>7.3}  alloc {:>7.3}/{:>7.3}",
            r.case,
            r.predicted as f64 / 1e9,
            r.measured as f64 / 1e9,
            100.0 * r.error(),
            r.reserved.0 as f64 / 1e9,
            r.reserved.1 as f64 / 1e9,
            r.allocated.0 as f64 / 1e9,
            r.allocated.1 as f64 / 1e9,
        );
    }
}

#[track_caller]
fn check_bounds(
    label: &str,
    rows: &[&Compared],
    median_bound: f64,
    max_bound: f64,
    under_allowed: usize,
) {
    assert!(!rows.is_empty(), "{label}: no cases");
    report(rows);
    let s = summarise(rows);
    println!(
        "{label}: cases={} median_abs_err={:.1}% p90_abs_err={:.1}% max_abs_err={:.1}% under_5pct={}",
        s.cases, s.median, s.p90, s.max, s.under_5pct
    );
    assert!(
        s.median <= median_bound,
        "{label}: median {:.1}% > {median_bound}%",
        s.median
    );
    assert!(
        s.max <= max_bound,
        "{label}: max {:.1}% > {max_bound}%",
        s.max
    );
    assert!(
        s.under_5pct <= under_allowed,
        "{label}: {} cases more than 5% under",
        s.under_5pct
    );
}

/// The text of a file under `measurements/`.
fn measurement_text(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Every case of a file under `measurements/`, none skipped, `expected` of
/// them.
fn measured_rows(file: &str, expected: usize) -> Vec<Compared> {
    let (rows, skipped) = compare_file(&measurement_text(file));
    assert!(skipped.is_empty(), "{file}: skipped {skipped:?}");
    assert_eq!(rows.len(), expected, "{file}");
    rows
}

/// The comparison of one named case of a file under `measurements/`.
fn measured_case(file: &str, case: &str) -> Compared {
    let (rows, _) = compare_file(&measurement_text(file));
    rows.into_iter().find(|r| r.case == case).expect(case)
}
