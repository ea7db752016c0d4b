#![allow(clippy::field_reassign_with_default)]
use headroom_core::*;
fn main() {
    let p = presets::find("llama-3.1-8b").unwrap();
    let mut w = Workload::default();
    w.batch = 1;
    w.seq_len = 65536;
    w.dtype = arch::Dtype::Bf16;
    for n in [1u32, 2, 3, 5, 16] {
        w.inference.new_tokens = n;
        let e = estimate(&p.arch, &w, &RuntimeProfile::h200()).unwrap();
        println!(
            "new_tokens {n}: reserved {:.3} alloc {:.3} peak op {}",
            e.reserved_peak.0 as f64 / 1e9,
            e.allocated_peak.0 as f64 / 1e9,
            e.peak_op
        );
    }
}
