//! Whether neighbouring lengths of a curve share the allocator's decisions:
//! `cargo run --release --features diagnostics --example placement_runs -- SPEC.json FROM TO [POINTS]`
//!
//! Replays the spec at POINTS (default 256) geometric lengths from FROM to
//! TO and compares, length to length, which segment (by creation order)
//! every allocation lands in. A curve could be computed once for a run of
//! lengths only where that placement is the same; the output counts the
//! runs and draws one character per length (`|` starts a new run).
use headroom_core::readers::Spec;
use headroom_core::search::lengths;
use headroom_core::trace::Replay;

fn placement(spec: &Spec, length: u32) -> Vec<(bool, u64)> {
    let workload = spec
        .workload
        .with_length(spec.model.arch.is_vision(), length);
    let mut replay = Replay::new(spec.runtime.allocator, None);
    replay.event_log = Some(Vec::new());
    headroom_core::families::replay(&spec.model.arch, &workload, &spec.runtime, &mut replay)
        .expect("replay");
    let log = replay.event_log.take().expect("event log");
    // The segment index sits above bit 44 of a block's location.
    log.into_iter()
        .map(|(alloc, _size, location, _op)| (alloc, location >> 44))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: placement_runs SPEC.json FROM TO [POINTS]";
    let spec = Spec::from_json(&std::fs::read_to_string(args.get(1).expect(usage)).unwrap())
        .expect("spec");
    let number = |i: usize, default: Option<u32>| -> u32 {
        args.get(i)
            .map(|s| s.parse().expect(usage))
            .or(default)
            .expect(usage)
    };
    let (from, to, points) = (number(2, None), number(3, None), number(4, Some(256)));
    let lengths = lengths(from, to, points as usize, true);
    let mut previous: Option<Vec<(bool, u64)>> = None;
    let (mut runs, mut same_events, mut line) = (0, 0, String::new());
    for &length in &lengths {
        let now = placement(&spec, length);
        match &previous {
            Some(p) if *p == now => line.push('.'),
            Some(p) => {
                same_events += usize::from(p.len() == now.len());
                runs += 1;
                line.push('|');
            }
            None => {
                runs += 1;
                line.push('|');
            }
        }
        previous = Some(now);
    }
    println!(
        "{runs} runs of identical placement over {} lengths ({from}..{to}); {same_events} of the {} changes keep the same number of events",
        lengths.len(),
        runs - 1
    );
    println!("{line}");
}
