#![allow(clippy::field_reassign_with_default)]
use headroom_core::*;
fn main() {
    let p = presets::find(&std::env::args().nth(1).unwrap_or("llama-3.2-1b".into())).unwrap();
    let mut w = Workload::default();
    w.mode = workload::Mode::Training;
    w.batch = 4;
    w.seq_len = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(512);
    w.training.steps = std::env::args()
        .nth(3)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    let e = estimate(&p.arch, &w, &RuntimeProfile::h200()).unwrap();
    println!(
        "reserved {:.3} alloc {:.3} peak op {}",
        e.reserved_peak.0 as f64 / 1e9,
        e.allocated_peak.0 as f64 / 1e9,
        e.peak_op
    );
    for s in &e.breakdown {
        println!(
            "  {:24} {:>10.3}",
            s.component.label(),
            s.bytes.0 as f64 / 1e9
        );
    }
}
