//! Allocation and free events of at least N MiB: `cargo run --example events -- SPEC.json N LIMIT [--after EARLIER.json]`
//! (`--after`: the job runs after EARLIER in the same process, as `estimate_after`; only its events are listed).
mod common;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (spec, mut r) = common::spec_and_replay(&args);
    let min: u64 = args.get(2).map_or(100, |s| s.parse().unwrap_or(100));
    let limit: usize = args.get(3).map_or(80, |s| s.parse().unwrap_or(80));
    r.event_log = Some(Vec::new());
    r.event_log_min = min << 20;
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    for (alloc, size, addr, op) in r.event_log.take().unwrap().into_iter().take(limit) {
        println!(
            "{} {:>5} seg{:>4}+{:>6}MiB layer {:?} {}",
            if alloc { "a" } else { "f" },
            size >> 20,
            addr >> 40,
            (addr & ((1 << 40) - 1)) >> 20,
            op.layer,
            op.name
        );
    }
}
