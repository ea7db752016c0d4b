//! Lists what is live at the peak: `cargo run --example live -- SPEC.json`.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::readers::Spec;
fn main() {
    let path = std::env::args().nth(1).expect("spec file");
    let spec = Spec::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    let e = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
    println!(
        "driver {:.3} GB reserved {:.3} alloc {:.3} at {}",
        e.driver_peak.as_gb(),
        e.reserved_peak.as_gb(),
        e.allocated_peak.as_gb(),
        e.peak_op
    );
    let groups =
        headroom_core::estimate::live_at_peak(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap();
    let filter = std::env::args().nth(2).unwrap_or_default();
    for g in groups.iter().filter(|g| g.op.contains(&filter)).take(400) {
        println!(
            "{:>10.1} MiB {:>5} {:20} {}",
            g.bytes.0 as f64 / 1048576.0,
            g.count,
            g.component.key(),
            g.op
        );
    }
}
