#![allow(clippy::field_reassign_with_default)]
use headroom_core::estimate::{estimate_reusing, EstimateOptions};
use headroom_core::search::lengths;
use headroom_core::{presets, RuntimeProfile, Workload};
fn main() {
    let arch = presets::find("llama-3.1-8b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut page = Workload::default();
    page.dtype = headroom_core::arch::Dtype::Bf16;
    page.batch = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2);
    let lens = lengths(128, 131_072, 256, true);
    let mut replay = headroom_core::trace::Replay::new(runtime.allocator, None);
    let rounds = 20;
    let start = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..rounds {
        for &l in &lens {
            let w = page.with_length(false, l);
            let e = estimate_reusing(&mut replay, &arch, &w, &runtime, EstimateOptions::default())
                .unwrap();
            sum = sum.wrapping_add(e.driver_peak.0);
        }
    }
    println!(
        "{:.2} ms per curve (one thread) {sum}",
        start.elapsed().as_secs_f64() * 1e3 / rounds as f64
    );
}
