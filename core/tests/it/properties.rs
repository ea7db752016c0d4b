//! Invariants of the estimate, checked on random workloads.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::arch::Dtype;
use headroom_core::workload::{Attention, InferenceKind, Logits, Mode, Optimizer, Precision};
use headroom_core::{estimate, presets, Component, RuntimeProfile, Workload};
use proptest::prelude::*;

fn preset_ids() -> Vec<&'static str> {
    presets::all().iter().map(|p| p.id).collect()
}

/// A random workload that the preset's family accepts (or should reject
/// with an error, never a panic).
fn workload() -> impl Strategy<Value = Workload> {
    (
        prop_oneof![Just(Mode::Inference), Just(Mode::Training)],
        1u32..8,
        1u32..3000,
        prop_oneof![
            Just(Dtype::Bf16),
            Just(Dtype::Fp16),
            Just(Dtype::Fp32),
            Just(Dtype::Int8),
            Just(Dtype::Int4)
        ],
        prop_oneof![Just(Attention::Sdpa), Just(Attention::Eager)],
        prop_oneof![Just(InferenceKind::Generate), Just(InferenceKind::Forward)],
        prop_oneof![Just(Logits::Last), Just(Logits::All), Just(Logits::None)],
        prop_oneof![
            Just(Optimizer::Adamw),
            Just(Optimizer::Sgd),
            Just(Optimizer::SgdMomentum),
            Just(Optimizer::Adafactor)
        ],
        prop_oneof![
            Just(Precision::AmpBf16),
            Just(Precision::Bf16),
            Just(Precision::Fp32)
        ],
        any::<bool>(),
        (0u32..4, 64u32..512),
    )
        .prop_map(
            |(
                mode,
                batch,
                seq_len,
                dtype,
                attention,
                kind,
                logits,
                optimizer,
                precision,
                ckpt,
                (tokens, image),
            )| {
                let mut w = Workload::default();
                w.mode = mode;
                w.batch = batch;
                w.seq_len = seq_len;
                w.image_size = Some(image);
                w.dtype = dtype;
                w.attention = attention;
                w.inference.kind = kind;
                w.inference.logits = logits;
                w.inference.new_tokens = tokens;
                w.training.optimizer = optimizer;
                w.training.precision = precision;
                w.training.grad_checkpointing = ckpt;
                w.training.steps = 2;
                w
            },
        )
}

fn small_preset() -> impl Strategy<Value = &'static str> {
    // Presets small enough to replay hundreds of times in a test run.
    prop::sample::select(vec![
        "llama-3.2-1b",
        "gpt2",
        "bert-base-uncased",
        "esm2-t33-650m",
        "vit-b-16",
        "resnet-50",
        "esmfold-v1",
        "mixtral-8x7b",
        "qwen2.5-0.5b",
    ])
}

/// Cases per property: the default, or `PROPTEST_CASES` for a longer hunt
/// (`PROPTEST_CASES=2000 cargo test --release -p headroom-core --test it properties::`).
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How far the allocated peak may drop when a job grows: the allocator does
/// not split a large block when less than 1 MiB would remain (nor a small
/// one under 512 B), so `max_memory_allocated` counts those remainders, and
/// a larger job that lands its blocks elsewhere can carry fewer of them.
/// The bound is the most remainder the smaller job's peak can hold: 1 MiB
/// per live block.
fn unsplit_remainder_bound(
    arch: &headroom_core::arch::Architecture,
    w: &Workload,
    rt: &RuntimeProfile,
) -> u64 {
    let groups = headroom_core::estimate::live_at_peak(arch, w, rt).unwrap();
    groups.iter().map(|g| g.count).sum::<u64>() * (1 << 20)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(96), .. ProptestConfig::default() })]

    /// The breakdown adds up to the driver-level peak, and no input panics.
    /// Its tensors are those of the allocated peak, the allocator's slack
    /// the rest of the reserved peak.
    #[test]
    fn breakdown_adds_up(id in small_preset(), w in workload()) {
        let arch = presets::find(id).unwrap().arch;
        if let Ok(e) = estimate(&arch, &w, &RuntimeProfile::h200()) {
            let sum: u64 = e.breakdown.iter().map(|s| s.bytes.0).sum();
            prop_assert_eq!(sum, e.driver_peak.0);
            let tensors: u64 = e
                .breakdown
                .iter()
                .filter(|s| (s.component as usize) < Component::IN_ALLOCATOR)
                .map(|s| s.bytes.0)
                .sum();
            prop_assert_eq!(tensors, e.allocated_peak.0);
            prop_assert_eq!(
                e.component(Component::AllocatorSlack).0,
                e.reserved_peak.0 - e.allocated_peak.0
            );
            prop_assert!(e.reserved_peak.0 >= e.allocated_peak.0);
            prop_assert!(e.driver_peak.0 > e.reserved_peak.0);
            prop_assert!(e.component(Component::Weights).0 > 0);
        }
    }

    /// More tokens never need less memory, except that a longer run can pick
    /// different cached blocks and end with less allocator slack (seen: 70 MB
    /// at 410 GB; 30 MB on ViT-B training at batch 1 -> 2): the drop is
    /// bounded by the shorter run's slack, and allocated bytes drop by at most the unsplit
    /// block remainders (`unsplit_remainder_bound`).
    /// Curves report the running maximum, which is exactly monotone
    /// (`curve_is_monotone`).
    #[test]
    fn longer_sequences_never_need_less(id in small_preset(), w in workload(), extra in 1u32..2000) {
        let arch = presets::find(id).unwrap().arch;
        let rt = RuntimeProfile::h200();
        let vision = arch.is_vision();
        let shorter = w.clone();
        let longer = w.with_length(vision, w.length(vision) + extra);
        if let (Ok(a), Ok(b)) = (estimate(&arch, &shorter, &rt), estimate(&arch, &longer, &rt)) {
            let slack = a.reserved_peak.0 - a.allocated_peak.0;
            prop_assert!(b.driver_peak.0 + slack >= a.driver_peak.0, "{} -> {}: {} > {}", w.length(vision), longer.length(vision), a.driver_peak, b.driver_peak);
            prop_assert!(
                b.allocated_peak.0 >= a.allocated_peak.0
                    || b.allocated_peak.0 + unsplit_remainder_bound(&arch, &shorter, &rt) >= a.allocated_peak.0,
                "allocated {} -> {}", a.allocated_peak, b.allocated_peak
            );
        }
    }

    /// A larger batch never needs less memory.
    #[test]
    fn larger_batches_never_need_less(id in small_preset(), w in workload(), extra in 1u32..8) {
        let arch = presets::find(id).unwrap().arch;
        let rt = RuntimeProfile::h200();
        let mut bigger = w.clone();
        bigger.batch += extra;
        if let (Ok(a), Ok(b)) = (estimate(&arch, &w, &rt), estimate(&arch, &bigger, &rt)) {
            let slack = a.reserved_peak.0 - a.allocated_peak.0;
            prop_assert!(b.driver_peak.0 + slack >= a.driver_peak.0, "batch {} -> {}: {} > {}", w.batch, bigger.batch, a.driver_peak, b.driver_peak);
            prop_assert!(
                b.allocated_peak.0 >= a.allocated_peak.0
                    || b.allocated_peak.0 + unsplit_remainder_bound(&arch, &w, &rt) >= a.allocated_peak.0,
                "allocated {} -> {}", a.allocated_peak, b.allocated_peak
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), .. ProptestConfig::default() })]

    /// Curves are exactly monotone: each point is the running maximum.
    #[test]
    fn curve_is_monotone(id in small_preset(), w in workload()) {
        let arch = presets::find(id).unwrap().arch;
        let lens = headroom_core::search::lengths(16, 4096, 48, true);
        if let Ok(points) = headroom_core::search::curve(&arch, &w, &RuntimeProfile::h200(), &lens) {
            for pair in points.windows(2) {
                prop_assert!(pair[1].estimate.driver_peak >= pair[0].estimate.driver_peak);
            }
        }
    }
}

#[test]
fn every_preset_estimates_its_default_workload() {
    for id in preset_ids() {
        let p = presets::find(id).unwrap();
        let mut w = Workload::default();
        if p.arch.is_vision() {
            w.image_size = Some(224);
        }
        if matches!(
            p.arch,
            headroom_core::Architecture::Encoder(_) | headroom_core::Architecture::EsmFold(_)
        ) {
            w.inference.kind = InferenceKind::Forward;
            w.inference.logits = Logits::None;
        }
        let e = estimate(&p.arch, &w, &RuntimeProfile::h200());
        assert!(e.is_ok(), "{id}: {:?}", e.err());
    }
}

/// Values at the edges of the shape ranges, now and then beyond them.
fn edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        9 => prop::sample::select(vec![1u64, 2, 4, 64, 1024, 4096, 65_536, 1 << 20, 1 << 22]),
        1 => prop::sample::select(vec![0u64, u32::MAX as u64]),
    ]
}

/// A spec JSON whose shapes and sizes sit at the edges of their ranges: a
/// Hugging Face config of any supported type, or a custom ViT, ResNet or
/// ESMFold, with an extreme workload.
fn extreme_spec() -> impl Strategy<Value = String> {
    let model_types = prop::sample::select(vec![
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "gemma2",
        "phi3",
        "gpt2",
        "bert",
        "esm",
    ]);
    let pow2 = |options: Vec<u64>| prop::sample::select(options);
    let shapes = (
        pow2(vec![1, 8, 64, 4096]),
        pow2(vec![1, 2, 8]),
        pow2(vec![8, 64, 4096, 1 << 20]),
        pow2(vec![1, 64, 4096]),
        pow2(vec![1, 64, 1 << 22]),
        pow2(vec![1, 2, 1024]),
        pow2(vec![1, 64, 1 << 22]),
        pow2(vec![1, 8, 1024]),
        pow2(vec![1, 2]),
    );
    // Mostly shapes that fit together (heads divide evenly), now and then
    // one field replaced by an edge value from beyond its range.
    let hf = (model_types, shapes, (0usize..24, edge())).prop_map(
        |(t, (heads, group, hidden, head_dim, inter, layers, vocab, experts, top_k), (slot, odd))| {
            let mut v = [
                vocab,
                hidden,
                inter,
                layers,
                heads,
                (heads / group).max(1),
                head_dim,
                experts,
                top_k,
                inter,
                hidden,
            ];
            if let Some(x) = v.get_mut(slot) {
                *x = odd;
            }
            format!(
                r#"{{"hf_config": {{"model_type": "{t}", "vocab_size": {}, "hidden_size": {}, "intermediate_size": {}, "num_hidden_layers": {}, "num_attention_heads": {}, "num_key_value_heads": {}, "head_dim": {}, "num_local_experts": {}, "num_experts": {}, "num_experts_per_tok": {}, "moe_intermediate_size": {}, "n_embd": {}, "n_head": 8, "n_layer": 2}}}}"#,
                v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[7], v[8], v[9], v[10]
            )
        },
    );
    let custom = (0u8..3, prop::collection::vec(edge(), 9)).prop_map(|(kind, v)| match kind {
        0 => format!(
            r#"{{"family": "vit", "image_size": {}, "patch_size": {}, "hidden_size": {}, "mlp_dim": {}, "num_layers": {}, "num_heads": {}, "num_classes": {}}}"#,
            v[0], v[1], v[2], v[3], v[4], v[5], v[6]
        ),
        1 => format!(
            r#"{{"family": "cnn", "topology": "res_net", "blocks": [{}, {}, 1, 2], "bottleneck": true, "num_classes": {}}}"#,
            v[0], v[1], v[2]
        ),
        _ => format!(
            r#"{{"family": "esm_fold", "stem": {{"kind": "esm", "vocab_size": 33, "hidden_size": {}, "intermediate_size": {}, "num_layers": {}, "num_heads": {}, "max_position_embeddings": 1026, "type_vocab_size": 0}}, "trunk_blocks": {}, "sequence_state_dim": {}, "pairwise_state_dim": {}, "sequence_head_width": 32, "pairwise_head_width": 32, "position_bins": 32, "max_recycles": 4, "structure_blocks": 8, "structure_sequence_dim": 384, "structure_pairwise_dim": 128, "ipa_heads": 12, "folding_params": {}}}"#,
            v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
        ),
    });
    let model = prop_oneof![hf, custom];
    let workload = (
        prop::sample::select(vec![1u64, 8, 64, 65_536]),
        prop::sample::select(vec![1u64, 512, 4096, 131_072, 4_194_304]),
        prop::sample::select(vec![16u64, 224, 8192]),
        prop::sample::select(vec!["inference", "training"]),
        prop::sample::select(vec!["sdpa", "eager"]),
        prop::sample::select(vec!["fp32", "bf16", "int4"]),
        prop::sample::select(vec!["amp_bf16", "bf16", "fp32"]),
        (0u64..64, any::<bool>()),
    )
        .prop_map(|(batch, seq, image, mode, attention, dtype, precision, (new_tokens, lora))| {
            let lora = if lora { r#", "lora": {"rank": 8}"# } else { "" };
            format!(
                r#"{{"mode": "{mode}", "batch": {batch}, "seq_len": {seq}, "image_size": {image}, "attention": "{attention}", "dtype": "{dtype}", "inference": {{"new_tokens": {new_tokens}}}, "training": {{"precision": "{precision}"{lora}}}}}"#
            )
        });
    (model, workload).prop_map(|(m, w)| format!(r#"{{"model": {m}, "workload": {w}}}"#))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), .. ProptestConfig::default() })]

    /// Shapes and workloads at the edges of their ranges give an estimate
    /// or an error naming a field, never a panic (tests build with overflow
    /// checks, so a `u64` size that would wrap fails here).
    #[test]
    fn extreme_shapes_never_panic(json in extreme_spec()) {
        if let Ok(spec) = headroom_core::readers::Spec::from_json(&json) {
            if let Err(e) = estimate(&spec.model.arch, &spec.workload, &spec.runtime) {
                let msg = e.to_string();
                prop_assert!(
                    msg.starts_with("`workload.") || msg.starts_with("`model"),
                    "`{}` does not name the field in backticks", msg
                );
            }
        }
    }
}
