//! Segments the replay creates: `cargo run --example segments -- SPEC.json [--log] [--after EARLIER.json]`
//! (`--after`: the job runs after EARLIER in the same process, as `estimate_after`).
#![allow(clippy::field_reassign_with_default)]

mod common;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (spec, mut r) = common::spec_and_replay(&args);
    r.segment_log = Some(Vec::new());
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    if std::env::args().any(|a| a == "--log") {
        for (op, size) in r.segment_log.take().unwrap() {
            if size >= 20 << 20 {
                println!(
                    "{:>8} MiB  layer {:?} step {:?} {}",
                    size >> 20,
                    op.layer,
                    op.step,
                    op.name
                );
            }
        }
    }
    let mut counts: std::collections::BTreeMap<(u64, u64), u32> = Default::default();
    for s in r
        .allocator()
        .segments()
        .into_iter()
        .filter(|s| s.0 > 100 << 20)
    {
        *counts.entry((s.0 >> 20, s.1 >> 20)).or_default() += 1;
    }
    for ((size, free), n) in counts {
        println!("{n:4} x {size:8} MiB segment, {free:8} MiB free");
    }
    println!(
        "reserved {} alloc-peak {}",
        r.stats().peak_reserved,
        r.stats().peak_allocated
    );
}
