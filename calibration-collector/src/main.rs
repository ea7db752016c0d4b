//! `calibration-collector`: estimate, check, and (soon) measure.
fn main() {
    println!("calibration-collector");
}
