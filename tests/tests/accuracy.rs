//! Accuracy of the driver-level peak against real H200 measurements.

use headroom_tests::{compare_file, public_measurements, Compared};

fn report(rows: &[Compared]) {
    for r in rows {
        println!(
            "{:48} pred {:>7.2} GB meas {:>7.2} GB err {:>+6.1}%  reserved {:>7.2}/{:>7.2}  alloc {:>7.2}/{:>7.2}",
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

#[test]
fn public_h200_cases_within_bounds() {
    let text = public_measurements()
        .expect("h200-public.jsonl (../shared/calibration or measurements/h200/public)");
    let (rows, skipped) = compare_file(&text);
    report(&rows);
    for (case, why) in &skipped {
        println!("skipped {case}: {why}");
    }
}
