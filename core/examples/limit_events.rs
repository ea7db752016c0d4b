//! Diagnostic: a replay under an allocator limit, every allocation and free
//! of at least N bytes and every segment created:
//! `cargo run --release --example limit_events -- SPEC.json LIMIT [MIN]`.
use headroom_core::readers::Spec;
use headroom_core::trace::Replay;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let spec = Spec::from_json(&std::fs::read_to_string(&args[1]).unwrap()).unwrap();
    let limit: u64 = args[2].parse().unwrap();
    let min: u64 = args.get(3).map_or(256 << 10, |s| s.parse().unwrap());
    let mut r = Replay::new(spec.runtime.allocator, Some(limit));
    r.event_log = Some(Vec::new());
    r.event_log_min = min;
    r.segment_log = Some(Vec::new());
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    for (op, size) in r.segment_log.take().unwrap() {
        println!("S {size} {:?} {:?} {}", op.step, op.layer, op.name);
    }
    for (alloc, size, address, op) in r.event_log.take().unwrap() {
        let kind = if alloc { "A" } else { "F" };
        println!(
            "{kind} {size} {} {} {:?} {:?} {}",
            address >> 44,
            address & ((1 << 44) - 1),
            op.step,
            op.layer,
            op.name
        );
    }
    println!("OOM {:?}", r.out_of_memory());
    println!("STATS {:?}", r.stats());
}
