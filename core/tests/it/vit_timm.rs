//! timm's ViT-B/16 inference as the H200 trace of `timm_infer.py` runs it
//! (fp16, batch 256, 224 px, two batches in a fresh process;
//! `measurements/real-jobs-2/trace-segments-8.jsonl.gz`, case
//! `timm_infer_vit_b16_fp16_x2`; blocks above 1 MiB, in MiB): the replay of
//! the `vit-base-patch16-224` preset makes the same allocations (to within
//! 1 MiB a block: the trace gives requested sizes, the replay block sizes)
//! and frees, in the same order, through the first batch and the start of
//! the second. What this pins, beside the blocks torchvision's model shares:
//! the class-token concatenation freed as soon as the positions are added,
//! the patch embedding's output when `_pos_embed` returns (trace events 4
//! to 7), and the position-embedded input held through the blocks and
//! freed before the final norm (events 246 to 248). timm's amp training
//! (the same file, `timm_vit_b16_train_bf16_b64`) is pinned by its peaks.

use crate::common;

use common::MIB;
use headroom_core::readers::Spec;
use headroom_core::{estimate, presets};

const TOLERANCE: f64 = 1.0;

fn replay_events(json: &str) -> Vec<(bool, f64)> {
    common::spec_events_above_one_mib(json)
        .into_iter()
        .map(|(alloc, size)| (alloc, size as f64 / MIB as f64))
        .collect()
}

/// Each replay event matches the trace's: the same kind, and an
/// allocation's size within [`TOLERANCE`].
#[track_caller]
fn assert_follows(events: &[(bool, f64)], trace: &[(bool, f64)]) {
    for (i, (&(alloc, mib), &(t_alloc, t_mib))) in events.iter().zip(trace).enumerate() {
        assert!(
            alloc == t_alloc && (!alloc || (mib - t_mib).abs() <= TOLERANCE),
            "event {i}: replay {} {mib:.2} MiB, trace {} {t_mib:.2} MiB",
            if alloc { "allocates" } else { "frees" },
            if t_alloc { "allocates" } else { "frees" },
        );
    }
}

#[test]
fn timm_vit_inference_follows_the_trace() {
    let events = replay_events(
        r#"{"model": "vit-base-patch16-224", "workload": {"mode": "inference",
        "batch": 256, "image_size": 224, "dtype": "fp16", "inference": {"batches": 2}},
        "runtime": {"process_ran_backward": false}}"#,
    );
    let trace = common::trace::<f64>("timm_vit_b16_fp16_inference_b256");
    assert!(
        events.len() >= trace.len(),
        "the replay has {} events",
        events.len()
    );
    assert_follows(&events, &trace);
}

/// timm's ViT-B/16 amp bf16 training with AdamW, batch 64, two steps, in a
/// fresh process (`timm_train.py`, traced: `timm_vit_b16_train_bf16_b64`):
/// `torch.cuda.max_memory_allocated()` 5,767,412,224 B and
/// `max_memory_reserved()` 6,283,067,392 B. The replay has the same
/// reserved bytes and its allocated peak within 1 MiB (its attention's
/// `qkv` views saved for SDPA, no transposed residual stream, no norm
/// copies); torchvision's graph gives 7.2 MB more allocated and 27 MB
/// less reserved.
#[test]
fn timm_vit_amp_training_peaks_match_the_trace() {
    let spec = Spec::from_json(
        r#"{"model": "vit-base-patch16-224", "workload": {"mode": "training",
        "batch": 64, "image_size": 224, "training": {"optimizer": "adamw",
        "precision": "amp_bf16", "steps": 2}}, "runtime": {"process_ran_backward": false}}"#,
    )
    .unwrap();
    let e = estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
    assert!(
        e.allocated_peak.0.abs_diff(5_767_412_224) < MIB,
        "allocated {}",
        e.allocated_peak.0
    );
    assert_eq!(e.reserved_peak.0, 6_283_067_392);
}

/// The timm presets are torchvision's shapes (the same parameters: timm's
/// `vit_base_patch16_224` and torchvision's `vit_b_16` both have
/// 86,567,656) built as timm builds them.
#[test]
fn timm_presets_share_torchvision_shapes() {
    use headroom_core::arch::{Architecture, VitLibrary};
    for (timm_id, torchvision_id) in [
        ("vit-base-patch16-224", "vit-b-16"),
        ("vit-large-patch16-224", "vit-l-16"),
    ] {
        let (Architecture::Vit(timm), Architecture::Vit(torchvision)) = (
            presets::find(timm_id).unwrap().arch,
            presets::find(torchvision_id).unwrap().arch,
        ) else {
            panic!("{timm_id} and {torchvision_id} are vision transformers");
        };
        assert_eq!(timm.library, VitLibrary::Timm);
        assert_eq!(torchvision.library, VitLibrary::Torchvision);
        assert_eq!(timm.params(), torchvision.params());
    }
}

/// timm's ViT-S/16 fp32 training with SGD and momentum, batch 128, as the
/// H200 trace runs it (`measurements/real-jobs-2/trace-segments-11.jsonl.gz`,
/// `timm_vit_s16_sgd_fp32_b128`, a fresh process): from the images through
/// the forward, the loss and every block's backward, 726 events. What this
/// pins: the patch embedding's fp32 cuDNN block as the sweep measured it
/// per shape (136.25 MiB, event 2), the memory-efficient kernel's backward
/// workspace, whose fp32 accumulator covers 256 rows for 197 tokens
/// (48.05 MiB, event 187), and the gradients of q, k and v stacked into
/// one packed tensor, then copied to the projection's layout (events 192
/// to 197). Next difference: event 726, the gradient reaching the class
/// token's concatenation, which the trace frees only after the step.
#[test]
fn timm_vit_fp32_training_follows_the_trace_through_the_blocks() {
    let events = replay_events(
        r#"{"model": "vit-small-patch16-224", "workload": {"mode": "training",
        "batch": 128, "image_size": 224, "training": {"optimizer": "sgd",
        "momentum": 0.9, "precision": "fp32", "steps": 2}},
        "runtime": {"process_ran_backward": false}}"#,
    );
    let trace = common::trace::<f64>("timm_vit_s16_sgd_fp32_b128");
    assert!(
        events.len() >= trace.len(),
        "the replay has {} events",
        events.len()
    );
    assert_follows(&events, &trace);
}

/// timm's ViT-B/16 fp32 training with AdamW, batch 288, as the H200 trace
/// runs it (`measurements/real-jobs-2/trace-segments-12.jsonl.gz`, its
/// blocks above 1 MiB in `trace-segments-12.events.txt` by
/// `trace_events.py`; a fresh process): the first 818 events, through the
/// forward, the loss and every block's backward. What this pins beyond
/// the ViT-S trace above: the patch embedding's forward block at a batch
/// beyond the sweep's table (`cnn::CUDNN_FP32_PATCHIFY_LARGE_BATCH`: the
/// input and filter copied with 4 channels, 223.5 MiB, event 2), the
/// memory-efficient kernel's logsumexp padded to 32 queries (197 tokens
/// keep 224 rows: 2.95 MiB per layer), and its fp32 backward's row sums of
/// `grad_out * out` and their transposed copy (2.6 MiB each) around the
/// workspace. Next difference: event 818, the class token's concatenation
/// in backward, whose gradient the trace keeps as a view until the patch
/// embedding's backward is done.
#[test]
fn timm_vit_b16_fp32_training_follows_the_trace_at_a_large_batch() {
    let events = replay_events(
        r#"{"model": "vit-base-patch16-224", "workload": {"mode": "training",
        "batch": 288, "image_size": 224, "training": {"optimizer": "adamw",
        "precision": "fp32", "steps": 3}},
        "runtime": {"process_ran_backward": false}}"#,
    );
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../measurements/real-jobs-2/trace-segments-12.events.txt"
    );
    let text = std::fs::read_to_string(path).expect(path);
    let trace: Vec<(bool, f64)> = text
        .lines()
        .map(|line| {
            let (kind, bytes) = line.split_once(' ').expect("`A BYTES` or `F BYTES`");
            let bytes: u64 = bytes.parse().expect("bytes");
            (kind == "A", bytes as f64 / MIB as f64)
        })
        .collect();
    assert!(trace.len() > 818 && events.len() > 818);
    assert_follows(&events[..818], &trace[..818]);
    // The logsumexp blocks to the byte (the tolerance above would let the
    // unpadded 2.6 MiB pass).
    let lse = 3_096_576.0 / MIB as f64;
    let padded: Vec<usize> = (0..818).filter(|&i| trace[i] == (true, lse)).collect();
    assert_eq!(padded.len(), 12, "one per layer");
    for i in padded {
        assert_eq!(events[i], (true, lse), "event {i}");
    }
    let (replay, traced) = (events[818], trace[818]);
    assert!(
        replay.0 != traced.0,
        "event 818 now follows the trace ({replay:?}); pin further"
    );
}
