//! Eager attention's `torch.matmul` operands, pinned to the H200 trace of
//! BERT-base fp32 inference, batch 16, 512 tokens, eager attention
//! (`measurements/h200-bert-eager/trace-segments-eager.jsonl`, events 15
//! to 19): the query and the key, both transposed views of their
//! projections, are copied (24 MiB each) before the 192 MiB scores, and
//! the key's copy is freed first.

use headroom_core::arch::Dtype;
use headroom_core::families::replay;
use headroom_core::trace::Replay;
use headroom_core::workload::{Attention, Mode};
use headroom_core::{presets, RuntimeProfile, Workload};

const MIB: u64 = 1 << 20;

#[test]
fn a_strided_query_and_key_are_copied_around_the_scores() {
    let arch = presets::find("bert-base-uncased").unwrap().arch;
    let workload = Workload {
        mode: Mode::Inference,
        batch: 16,
        seq_len: 512,
        attention: Attention::Eager,
        dtype: Dtype::Fp32,
        ..Workload::default()
    };
    let mut runtime = RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let mut r = Replay::new(runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = MIB + 1;
    replay(&arch, &workload, &runtime, &mut r).unwrap();
    let events: Vec<(bool, u64)> = r
        .event_log
        .take()
        .unwrap()
        .into_iter()
        .map(|(alloc, size, _, _)| (alloc, size / MIB))
        .collect();
    let scores = events
        .iter()
        .position(|&e| e == (true, 192))
        .expect("the first layer's scores");
    assert_eq!(
        events[scores - 2..scores + 3],
        [
            (true, 24),
            (true, 24),
            (true, 192),
            (false, 24),
            (false, 24)
        ]
    );
}
