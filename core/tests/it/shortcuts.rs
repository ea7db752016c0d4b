//! The replay's shortcuts are optimisations only: they must give exactly
//! the estimate of the full replay.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate_with, EstimateOptions, ReplayOptions};
use headroom_core::parallel::Strategy;
use headroom_core::workload::{InferenceKind, Mode, Optimizer, Precision};
use headroom_core::{estimate, presets, RuntimeProfile, Workload};

#[test]
fn decode_shortcut_matches_full_replay() {
    let runtime = RuntimeProfile::h200();
    for id in [
        "llama-3.1-8b",
        "llama-3.2-1b",
        "mixtral-8x7b",
        "qwen2.5-7b",
        "gpt2",
        "gemma-2-9b",
        "phi-3-mini-4k",
        "phi-3-medium-4k",
    ] {
        let arch = presets::find(id).unwrap().arch;
        for (batch, seq) in [
            (1u32, 128u32),
            // Sliding windows (Phi-3 2,047, Gemma 2 4,096) filled during
            // the decode steps: from then on those layers take a mask.
            (2, 2044),
            (1, 4093),
            (16, 4093),
            (1, 4096),
            (4, 8192),
            (32, 2048),
            (1, 65536),
            (96, 512),
        ] {
            let mut w = Workload::default();
            w.mode = Mode::Inference;
            w.inference.kind = InferenceKind::Generate;
            w.inference.new_tokens = 6;
            w.batch = batch;
            w.seq_len = seq;
            // Beam search reorders every layer's cache after each step.
            if seq == 2048 || seq == 4096 {
                w.inference.num_beams = 3;
            }
            let fast = estimate(&arch, &w, &runtime).unwrap();
            let full_replay = EstimateOptions {
                replay: ReplayOptions {
                    decode_shortcut: false,
                    ..ReplayOptions::default()
                },
                ..EstimateOptions::default()
            };
            let full = estimate_with(&arch, &w, &runtime, full_replay).unwrap();
            assert!(fast.driver_peak.0 > 0);
            assert_eq!(fast.driver_peak, full.driver_peak, "{id} b{batch} s{seq}");
            assert_eq!(
                fast.allocated_peak, full.allocated_peak,
                "{id} b{batch} s{seq}"
            );
            assert_eq!(
                fast.reserved_peak, full.reserved_peak,
                "{id} b{batch} s{seq}"
            );
        }
    }
}

/// Every later step is replayed in full (the reference).
fn every_step() -> EstimateOptions {
    EstimateOptions {
        replay: ReplayOptions {
            steady_state_shortcut: false,
            ..ReplayOptions::default()
        },
        ..EstimateOptions::default()
    }
}

/// A training job at batch 2 over 512 tokens (224 px for vision models).
fn small_training(
    arch: &headroom_core::arch::Architecture,
    precision: Precision,
    optimizer: Optimizer,
    checkpointing: bool,
) -> Workload {
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 2;
    w.seq_len = 512;
    if arch.is_vision() {
        w.image_size = Some(224);
    }
    w.training.precision = precision;
    w.training.optimizer = optimizer;
    w.training.grad_checkpointing = checkpointing;
    w
}

#[test]
fn steady_state_shortcut_matches_replaying_every_step() {
    let runtime = RuntimeProfile::h200();
    let mut expandable = RuntimeProfile::h200();
    expandable.allocator.expandable_segments = true;
    let jobs: &[(&str, Precision, Optimizer, bool, Strategy)] = &[
        (
            "gpt2",
            Precision::AmpBf16,
            Optimizer::Adamw,
            false,
            Strategy::None,
        ),
        (
            "gpt2",
            Precision::Fp32,
            Optimizer::SgdMomentum,
            true,
            Strategy::None,
        ),
        (
            "llama-3.2-1b",
            Precision::Bf16,
            Optimizer::Adamw,
            false,
            Strategy::None,
        ),
        (
            "llama-3.2-1b",
            Precision::AmpBf16,
            Optimizer::Adamw,
            true,
            Strategy::Ddp,
        ),
        (
            "llama-3.2-1b",
            Precision::Fp32,
            Optimizer::Adamw,
            false,
            Strategy::Fsdp2,
        ),
        (
            "llama-3.2-1b",
            Precision::AmpBf16,
            Optimizer::Adafactor,
            false,
            Strategy::Zero1,
        ),
        (
            "bert-base-uncased",
            Precision::AmpBf16,
            Optimizer::Adamw,
            false,
            Strategy::None,
        ),
        (
            "resnet-50",
            Precision::AmpBf16,
            Optimizer::SgdMomentum,
            false,
            Strategy::None,
        ),
        (
            "vit-b-16",
            Precision::Fp32,
            Optimizer::Adamw,
            false,
            Strategy::None,
        ),
    ];
    for &(id, precision, optimizer, checkpointing, strategy) in jobs {
        let arch = presets::find(id).unwrap().arch;
        for steps in [3u32, 4, 7] {
            for rt in [&runtime, &expandable] {
                let mut w = small_training(&arch, precision, optimizer, checkpointing);
                w.training.steps = steps;
                w.parallel.strategy = strategy;
                let fast = estimate(&arch, &w, rt).unwrap();
                let full = estimate_with(&arch, &w, rt, every_step()).unwrap();
                let what = format!("{id} {precision:?} {optimizer:?} {strategy:?} steps {steps}");
                assert_eq!(fast, full, "{what}");
            }
        }
    }
}

#[test]
fn settled_micro_batches_match_replaying_every_one() {
    // Gradient accumulation: the micro-batches after the second are cut
    // short once one ends where the one before it ended.
    let runtime = RuntimeProfile::h200();
    let jobs: &[(&str, Precision, Optimizer, bool)] = &[
        ("gpt2", Precision::AmpFp16, Optimizer::Adamw, false),
        ("llama-3.2-1b", Precision::Bf16, Optimizer::Adamw, true),
        (
            "bert-base-uncased",
            Precision::Fp32,
            Optimizer::Adamw,
            false,
        ),
        (
            "resnet-50",
            Precision::AmpBf16,
            Optimizer::SgdMomentum,
            false,
        ),
        ("vit-b-16", Precision::AmpFp16, Optimizer::Adamw, false),
    ];
    for &(id, precision, optimizer, checkpointing) in jobs {
        let arch = presets::find(id).unwrap().arch;
        for accumulation in [2u32, 3, 6] {
            let mut w = small_training(&arch, precision, optimizer, checkpointing);
            w.training.steps = 3;
            w.training.gradient_accumulation_steps = accumulation;
            let fast = estimate(&arch, &w, &runtime).unwrap();
            let full = estimate_with(&arch, &w, &runtime, every_step()).unwrap();
            assert_eq!(fast, full, "{id} {precision:?} accumulating {accumulation}");
        }
    }
}

#[test]
fn a_thousand_steps_replay_like_a_few() {
    // A job whose state settles: the shortcut makes 1,000 steps cost what a
    // handful cost, and gives the same answer as 3 steps.
    let arch = presets::find("llama-3.2-1b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 4;
    w.seq_len = 1024;
    w.training.steps = 3;
    let three = estimate(&arch, &w, &runtime).unwrap();
    w.training.steps = 1000;
    let thousand = estimate(&arch, &w, &runtime).unwrap();
    assert_eq!(three, thousand);
}

/// At a card's end (the job empties its cache to go on) no step repeats
/// the one before, so the replay follows a fixed number of steps past the
/// first release and stops: Llama 3.1 70B over 8 ranks with FSDP2 at
/// 23,554 tokens on the H200's memory, 8 or 50 steps, gives one answer
/// from the same few steps. Replaying all 50 took as long as 50 steps and
/// a search over such jobs grew with their steps.
#[test]
fn a_job_at_the_cards_end_replays_a_few_steps_past_its_first_release() {
    use headroom_core::estimate::estimate_with_timeline;
    use headroom_core::families::optim::STEPS_PAST_THE_CARDS_END;
    let arch = presets::find("llama-3.1-70b").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 1;
    w.seq_len = 23_554;
    w.training.precision = Precision::Bf16;
    w.training.grad_checkpointing = true;
    w.parallel.strategy = Strategy::Fsdp2;
    w.parallel.world_size = 8;
    let options = EstimateOptions {
        capacity: Some(headroom_core::gpus::find("h200").unwrap().usable_bytes),
        ..EstimateOptions::default()
    };
    let mut answers = Vec::new();
    for steps in [8, 50] {
        w.training.steps = steps;
        let (e, timeline) = estimate_with_timeline(&arch, &w, &runtime, options).unwrap();
        assert!(e.reached_capacity && e.fits, "{steps} steps: {e:?}");
        let last = timeline
            .spans()
            .iter()
            .filter_map(|s| s.step)
            .max()
            .unwrap();
        assert!(
            last <= 2 + STEPS_PAST_THE_CARDS_END,
            "{steps} steps: replayed up to step {last}"
        );
        answers.push(e);
    }
    assert_eq!(answers[0], answers[1]);
}

#[test]
fn repeated_inference_batches_match_replaying_every_one() {
    // An inference loop: once a batch from the third on ends where one
    // since the second ended, the later batches repeat that cycle and are
    // not replayed. In a fresh process (the first batch creates the cuBLAS
    // workspace) and in one that holds it from the start.
    use headroom_core::workload::MemoryFormat::{ChannelsLast, Contiguous};
    use InferenceKind::{Forward, Generate};
    let jobs = [
        ("resnet-18", Forward, Some(64), ChannelsLast),
        ("mobilenetv2", Forward, Some(64), Contiguous),
        ("vit-b-16", Forward, Some(64), Contiguous),
        ("bert-base-uncased", Forward, None, Contiguous),
        ("gpt2", Forward, None, Contiguous),
        ("gpt2", Generate, None, Contiguous),
    ];
    for fresh in [true, false] {
        let mut runtime = RuntimeProfile::h200();
        runtime.process_ran_backward = !fresh;
        for (id, kind, image, format) in jobs {
            let arch = presets::find(id).unwrap().arch;
            let mut w = Workload::default();
            w.batch = 2;
            w.seq_len = 128;
            w.image_size = image;
            w.memory_format = format;
            w.inference.kind = kind;
            w.inference.new_tokens = 3;
            w.inference.batches = 7;
            let fast = estimate(&arch, &w, &runtime).unwrap();
            let full = estimate_with(&arch, &w, &runtime, every_step()).unwrap();
            assert_eq!(fast, full, "{id} {kind:?} fresh={fresh}");
            // A million batches replay like seven.
            w.inference.batches = 1_000_000;
            let million = estimate(&arch, &w, &runtime).unwrap();
            assert_eq!(million, fast, "{id} {kind:?} fresh={fresh}");
        }
    }
}

/// A chunked ESMFold triangular attention replayed through its first full
/// chunks and its last gives exactly what replaying every chunk gives:
/// lengths that divide into the chunks and lengths that leave a shorter
/// last chunk, chunks from 1 to more than the rows, both stem precisions.
#[test]
fn chunk_shortcut_matches_full_replay() {
    let arch = presets::find("esmfold-v1").unwrap().arch;
    let runtime = RuntimeProfile::h200();
    let every_chunk = EstimateOptions {
        replay: ReplayOptions {
            chunk_shortcut: false,
            ..ReplayOptions::default()
        },
        ..EstimateOptions::default()
    };
    let mut compared = 0;
    for (seq, chunks) in [
        (24u32, &[1u32, 2, 5, 7, 24, 64][..]),
        (96, &[4, 8, 32, 40, 96]),
        (250, &[16, 32, 64, 100, 128]),
        (512, &[8, 64, 128, 200]),
    ] {
        for &chunk in chunks {
            for stem in [
                headroom_core::arch::Dtype::Fp16,
                headroom_core::arch::Dtype::Fp32,
            ] {
                let mut w = Workload::default();
                w.mode = Mode::Inference;
                w.seq_len = seq;
                w.esmfold.chunk_size = Some(chunk);
                w.esmfold.stem_dtype = stem;
                w.esmfold.num_recycles = Some(1);
                let fast = estimate(&arch, &w, &runtime).unwrap();
                let full = estimate_with(&arch, &w, &runtime, every_chunk).unwrap();
                assert_eq!(fast, full, "L{seq} chunk {chunk} stem {stem:?}");
                compared += 1;
            }
        }
    }
    assert_eq!(compared, 40);
}
