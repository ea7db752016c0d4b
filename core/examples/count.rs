#![allow(clippy::field_reassign_with_default)]
use headroom_core::*;
use std::time::Instant;
fn main() {
    let id = std::env::args().nth(1).unwrap();
    let mode = std::env::args().nth(2).unwrap();
    let p = presets::find(&id).unwrap();
    let mut w = Workload::default();
    if mode == "train" {
        w.mode = workload::Mode::Training;
    }
    w.seq_len = 4096;
    let rt = RuntimeProfile::h200();
    let mut r = trace::Replay::new(rt.allocator, None);
    let t = Instant::now();
    families::replay(&p.arch, &w, &rt, &mut r).unwrap();
    println!(
        "allocs {} segments {} in {:?}",
        r.allocations(),
        r.stats().segments_created,
        t.elapsed()
    );
    let t = Instant::now();
    for _ in 0..10 {
        let _ = estimate(&p.arch, &w, &rt).unwrap();
    }
    println!("estimate: {:?} per point", t.elapsed() / 10);
}
