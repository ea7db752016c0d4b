#![allow(clippy::field_reassign_with_default)]
use headroom_core::*;
fn main() {
    for layers in [1u32, 2, 3] {
        let a = Architecture::Decoder(presets::llama_like(128256, 2048, 8192, layers, 32, 8, true));
        let mut w = Workload::default();
        w.mode = workload::Mode::Training;
        w.batch = 4;
        w.seq_len = 1024;
        w.training.steps = 2;
        let e = estimate(&a, &w, &RuntimeProfile::h200()).unwrap();
        println!(
            "layers {layers}: alloc {:.1} MiB op {} acts {:.1} MiB transient {:.1} weights {:.1}",
            e.allocated_peak.0 as f64 / 1048576.0,
            e.peak_op,
            e.component(Component::Activations).0 as f64 / 1048576.0,
            e.component(Component::Transient).0 as f64 / 1048576.0,
            e.component(Component::Weights).0 as f64 / 1048576.0
        );
    }
}
