//! Every large-pool allocation and free of a replay, one per line, for
//! `measurements/h200-segments/align_trace.py`:
//! `cargo run --release --example dump_events -- SPEC.json [--after EARLIER.json] [--min BYTES] > ours.txt`.
//! Each line: `A|F size address layer op` (`layer` as `Some(n)` or `None`).
//! `--min 0` lists the small pool's events too.
mod common;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (spec, mut r) = common::spec_and_replay(&args);
    r.event_log = Some(Vec::new());
    r.event_log_min = match args.iter().position(|a| a == "--min") {
        Some(i) => args[i + 1].parse().expect("--min BYTES"),
        None => headroom_core::allocator::SMALL_SIZE + 1,
    };
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    for (alloc, size, address, op) in r.event_log.take().unwrap() {
        let kind = if alloc { "A" } else { "F" };
        println!("{kind} {size} {address} {:?} {}", op.layer, op.name);
    }
}
