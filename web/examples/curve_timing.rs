//! Times the page's curve computation natively: 256 estimates per preset.
//! `cargo run -p headroom-web --release --example curve_timing`
use headroom_web::curve::CurveData;
use headroom_web::state::AppState;
use std::time::Instant;

fn main() {
    for p in headroom_core::presets::all() {
        let s = AppState::for_model(p.model());
        let rt = headroom_core::RuntimeProfile::h200();
        let t = Instant::now();
        let runs = 5;
        let mut c = CurveData::default();
        for _ in 0..runs {
            c = CurveData::compute(&p.arch, &s.workload, &rt, &s.view, 256);
        }
        let ms = t.elapsed().as_secs_f64() * 1000.0 / runs as f64;
        println!(
            "{:<22} {:>8.2} ms  ok {:>3} failed {:>3} {}",
            p.id,
            ms,
            c.lengths.len(),
            c.failed,
            c.error.map(|e| e.1).unwrap_or_default()
        );
    }
}
