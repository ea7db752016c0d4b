//! Throwaway: jobs of several models in one process.
use headroom_core::component::Component;
use headroom_core::spec::Spec;
use headroom_core::trace::Replay;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut replay: Option<Replay> = None;
    let mut prev_model = String::new();
    for path in &args {
        let text = std::fs::read_to_string(path).unwrap();
        let mut spec = Spec::from_json(&text).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let model = v["model"].to_string();
        spec.runtime.process_ran_backward = false;
        let r = replay.get_or_insert_with(|| {
            let mut r = Replay::new(spec.runtime.allocator, None);
            r.track_blocks();
            r
        });
        if !prev_model.is_empty() {
            if prev_model == model {
                r.start_next_job(&headroom_core::estimate::KEPT_BETWEEN_JOBS);
            } else {
                r.start_next_job(&[Component::LibraryWorkspace]);
            }
        }
        for (b, size) in r.allocator().live_blocks() {
            if size >= 1 << 20 {
                println!(
                    "   live block {:8.2} MiB at seg-offset {:8.2} MiB (addr {:x})",
                    size as f64 / 1048576.0,
                    (r.allocator().block_location(b) & ((1u64 << 44) - 1)) as f64 / 1048576.0,
                    r.allocator().block_address(b)
                );
            }
        }
        let segs: Vec<_> = r
            .allocator()
            .segments()
            .into_iter()
            .map(|(s, f)| (s >> 20, f >> 20))
            .collect();
        headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, r)
            .unwrap();
        let m = &v["measured"];
        println!(
            "{:45} start-segs(MiB size,free) {}\n    resv {:>8.1} (meas {:>8.1})  alloc {:>8.1} (meas {:>8.1})",
            v["case"].as_str().unwrap(),
            if segs.len() < 20 { format!("{segs:?}") } else { format!("{} segs", segs.len()) },
            r.stats().peak_reserved as f64 / 1048576.0,
            m["reserved_peak"].as_u64().unwrap_or(0) as f64 / 1048576.0,
            r.stats().peak_allocated as f64 / 1048576.0,
            m["alloc_peak"].as_u64().unwrap_or(0) as f64 / 1048576.0,
        );
        prev_model = model;
    }
}
