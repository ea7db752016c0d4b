//! How `torch.optim` runs its update changes the step's temporaries:
//! foreach AdamW holds a `_foreach_sqrt` result for every parameter at
//! once, the one-parameter-at-a-time loop two for one parameter, the fused
//! kernel none (but a GPU `step` counter per parameter).
#![allow(clippy::field_reassign_with_default)]

use headroom_core::estimate::{estimate, Estimate};
use headroom_core::readers::Spec;
use headroom_core::workload::{Mode, Optimizer, OptimizerImpl, Precision};
use headroom_core::{presets, Component, RuntimeProfile, Workload};

fn train(id: &str, optimizer: Optimizer, implementation: OptimizerImpl) -> Estimate {
    let arch = presets::find(id).unwrap().arch;
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = 1;
    w.seq_len = 128;
    w.training.precision = Precision::Fp32;
    w.training.optimizer = optimizer;
    w.training.implementation = implementation;
    w.training.steps = 3;
    estimate(&arch, &w, &RuntimeProfile::h200()).unwrap()
}

#[test]
fn foreach_adamw_peaks_in_its_step_by_a_weight_copy_the_fused_kernel_lacks() {
    // Llama-3.2-1B in fp32 at a short length: foreach AdamW's step is the
    // peak, with the two moments and the `_foreach_sqrt` temporaries (three
    // weight copies) as optimizer state.
    let foreach = train("llama-3.2-1b", Optimizer::Adamw, OptimizerImpl::Foreach);
    let fused = train("llama-3.2-1b", Optimizer::Adamw, OptimizerImpl::Fused);
    let for_loop = train("llama-3.2-1b", Optimizer::Adamw, OptimizerImpl::ForLoop);
    let weights = 1_235_814_400u64 * 4;
    assert!(
        foreach.peak_op.contains("_foreach_sqrt"),
        "{}",
        foreach.peak_op
    );
    assert_eq!(foreach.component(Component::OptimizerState).0, 3 * weights);
    // Without the temporaries the peak moves to the embedding's backward.
    assert!(!fused.peak_op.contains("optimizer"), "{}", fused.peak_op);
    assert!(fused.allocated_peak.0 + (2 << 30) < foreach.allocated_peak.0);
    // The fused step counters: a 4-byte GPU tensor per parameter tensor
    // (146 of them), each a 512-byte block of the small pool.
    let moments = 2 * weights;
    let counters = fused.component(Component::OptimizerState).0 - moments;
    assert_eq!(counters, 146 * 512, "{fused:?}");
    // One parameter at a time: two temporaries of one parameter, never all.
    assert!(for_loop.allocated_peak.0 < foreach.allocated_peak.0);
    assert_eq!(for_loop.component(Component::OptimizerState).0, moments);
}

#[test]
fn sgd_updates_in_place_whatever_the_implementation() {
    let foreach = train("gpt2", Optimizer::SgdMomentum, OptimizerImpl::Foreach);
    let fused = train("gpt2", Optimizer::SgdMomentum, OptimizerImpl::Fused);
    let for_loop = train("gpt2", Optimizer::SgdMomentum, OptimizerImpl::ForLoop);
    assert_eq!(foreach, fused);
    assert_eq!(foreach, for_loop);
}

#[test]
fn the_spec_names_the_implementation_and_refuses_a_fused_adafactor() {
    let spec = |training: &str| {
        Spec::from_json(&format!(
            r#"{{"model": "gpt2", "workload": {{"mode": "training", "training": {training}}}}}"#
        ))
    };
    let s = spec(r#"{"optimizer": "adamw", "implementation": "fused"}"#).unwrap();
    assert_eq!(s.workload.training.implementation, OptimizerImpl::Fused);
    assert_eq!(
        spec(r#"{"optimizer": "adamw"}"#)
            .unwrap()
            .workload
            .training
            .implementation,
        OptimizerImpl::Foreach
    );
    let err = spec(r#"{"optimizer": "adafactor", "implementation": "fused"}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`workload.training.implementation`"), "{err}");
    assert!(err.contains("no fused implementation"), "{err}");
    let err = spec(r#"{"implementation": "apex"}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("\"foreach\", \"fused\" or \"for_loop\""),
        "{err}"
    );
}

/// LoRA under `Trainer(bf16=True)`: fp32 adapters on a bf16 base under
/// autocast, whose `lora_A` saves a bf16 copy of its input rather than the
/// fp32 cast. Pinned to the H200 measurement of the Trainer's LoRA job
/// (`measurements/real-jobs/`, `trainer_llama1b_lora_b4_L1024`: allocated
/// peak 14,370,005,504 B).
#[test]
fn lora_under_autocast_saves_the_adapters_input_in_bf16() {
    let spec = |precision: &str| {
        Spec::from_json(&format!(
            r#"{{"model": "llama-3.2-1b", "workload": {{"mode": "training", "batch": 4, "seq_len": 1024, "dtype": "bf16",
                "training": {{"optimizer": "adamw", "implementation": "fused", "precision": "{precision}", "steps": 3, "use_cache": true,
                "lora": {{"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}}}}}}}}"#
        ))
        .unwrap()
    };
    let run = |s: Spec| estimate(&s.model.arch, &s.workload, &s.runtime).unwrap();
    let autocast = run(spec("amp_bf16"));
    let plain = run(spec("bf16"));
    let measured = 14_370_005_504u64;
    assert!(
        autocast.allocated_peak.0.abs_diff(measured) < 1 << 20,
        "{} vs {measured}",
        autocast.allocated_peak.0
    );
    // Two adapters in each of 16 layers keep a 16 MiB bf16 input instead
    // of a 32 MiB fp32 one.
    let saved = plain.allocated_peak.0 - autocast.allocated_peak.0;
    assert!(saved.abs_diff(2 * 16 * (16 << 20)) < 1 << 20, "{saved}");
}
