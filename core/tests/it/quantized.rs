//! Jobs with bitsandbytes-quantized weights: QLoRA fine-tuning and 4-/8-bit
//! generation, measured on the H100 in fresh processes
//! (`measurements/qlora/h100-2026-12-07/`, predicted before they ran:
//! `measurements/qlora/predicted-before-measuring.txt`), and the boundary of
//! a QLoRA job scaled to fill the card.

use headroom_core::arch::Dtype;
use headroom_core::readers::Spec;
use headroom_core::search::{boundary, probe_at, Axis};
use headroom_core::uncertainty::{band_for, unmeasured_note, QUANTIZED_FAMILY};
use serde_json::{json, Value};

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Each case of a measurement file as a spec (its model and workload, in a
/// fresh process) and its measured driver-level peak.
fn cases(path: &str) -> Vec<(String, Spec, u64, Value)> {
    repo_file(path)
        .lines()
        .map(|line| {
            let case: Value = serde_json::from_str(line).unwrap();
            let spec = json!({"model": case["model"], "workload": case["workload"],
                              "runtime": {"process_ran_backward": false}});
            (
                case["case"].as_str().unwrap().to_string(),
                Spec::from_value(&spec).unwrap(),
                case["measured"]["driver_peak"].as_u64().unwrap(),
                case,
            )
        })
        .collect()
}

/// The errors of every measured job: a median of at most 1.5%, none over
/// 2%; none under by more than 3% but the 8-bit QLoRA job, whose
/// LLM.int8 layers keep the input's outlier columns (`subA`) for backward:
/// on random weights the MLP's `down_proj` input has hundreds of them per
/// layer, which the model does not count (the trace of the same job at
/// batch 2, 512 tokens: 16 copies of 1.44 MiB live at the peak).
#[test]
fn quantized_jobs_are_predicted_within_their_targets() {
    let mut errors = Vec::new();
    for (name, spec, measured, case) in cases("measurements/qlora/h100-2026-12-07/measured.jsonl") {
        let e = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
        let error = (e.driver_peak.0 as f64 - measured as f64) / measured as f64;
        let eight_bit_training =
            spec.workload.dtype == Dtype::Int8 && case["workload"]["mode"] == "training";
        if eight_bit_training {
            assert!((-0.05..0.0).contains(&error), "{name}: {error:+.4}");
        } else {
            assert!((-0.03..=0.02).contains(&error), "{name}: {error:+.4}");
        }
        errors.push(error.abs());
    }
    assert_eq!(errors.len(), 13);
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    assert!(median <= 0.015, "median {median:.4}");
}

/// Their allocated peaks, which the driver's overheads do not blur: within
/// 1% for every 4-bit job (to a few MB for most).
#[test]
fn four_bit_jobs_allocate_what_the_replay_allocates() {
    for (name, spec, _, case) in cases("measurements/qlora/h100-2026-12-07/measured.jsonl") {
        if !matches!(spec.workload.dtype, Dtype::Int4 | Dtype::Int4Dq) {
            continue;
        }
        let e = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
        let measured = case["measured"]["alloc_peak"].as_u64().unwrap();
        let error = (e.allocated_peak.0 as f64 - measured as f64) / measured as f64;
        assert!(error.abs() < 0.01, "{name}: allocated {error:+.4}");
    }
}

/// The second set, Qwen2.5-7B (`measurements/qlora/h100-2026-12-07-set2/`,
/// predicted before it ran): the allocated peaks within 0.5% (24 MB); the
/// driver-level peaks within 3%, the two QLoRA jobs over by the
/// allocator's cache (+2.6% and +2.7%: 0.9 GB more reserved than the GPU
/// held, with the same bytes allocated), the generation jobs within 0.5%.
#[test]
fn qwen_7b_quantized_jobs_predicted_before_they_ran() {
    let measured = cases("measurements/qlora/h100-2026-12-07-set2/measured.jsonl");
    assert_eq!(measured.len(), 4);
    for (name, spec, driver_peak, case) in measured {
        let e = headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap();
        let error =
            |predicted: u64, measured: u64| (predicted as f64 - measured as f64) / measured as f64;
        let allocated = case["measured"]["alloc_peak"].as_u64().unwrap();
        let alloc_error = error(e.allocated_peak.0, allocated);
        assert!(
            alloc_error.abs() < 0.005,
            "{name}: allocated {alloc_error:+.4}"
        );
        let driver_error = error(e.driver_peak.0, driver_peak);
        let bound = if case["workload"]["mode"] == "training" {
            0.0..0.03
        } else {
            -0.005..0.005
        };
        assert!(bound.contains(&driver_error), "{name}: {driver_error:+.4}");
    }
}

/// Llama 3.1 8B QLoRA (nf4, double quantization, paged 8-bit AdamW,
/// checkpointing, two steps) scaled to fill the H100: 27,280 tokens ran
/// (83.61 GB) and 28,960 ran out of memory. The replay's boundary on the
/// card's usable memory (28,196) lies between them, each about 3% from it
/// (0.968 and 1.027 of it).
#[test]
fn the_qlora_boundary_on_the_h100_holds() {
    let measured = cases("measurements/qlora/h100-2026-12-07/boundary.jsonl");
    let (_, spec, _, ran) = &measured[0];
    let (_, _, _, failed) = &measured[1];
    assert_eq!(ran["measured"]["status"], "ok");
    assert_eq!(failed["measured"]["status"], "oom");
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let h100 = headroom_core::gpus::find("h100-80gb").unwrap().usable_bytes;
    let found = boundary(arch, w, rt, h100, Axis::Length).unwrap();
    let longest = found.longest.unwrap() as f64;
    let ran_len = ran["workload"]["seq_len"].as_u64().unwrap();
    let failed_len = failed["workload"]["seq_len"].as_u64().unwrap();
    assert!(ran_len as f64 <= 0.975 * longest, "{ran_len} vs {longest}");
    assert!(
        failed_len as f64 >= 1.025 * longest,
        "{failed_len} vs {longest}"
    );
    // The length that ran runs within the card's memory; the one that ran
    // out reaches it: the replay would run it only by PyTorch freeing its
    // cache and retrying, the path `gpus` reports apart and does not plan on.
    assert!(
        probe_at(arch, w, rt, h100, Axis::Length, ran_len)
            .unwrap()
            .within_capacity
    );
    let over = probe_at(arch, w, rt, h100, Axis::Length, failed_len).unwrap();
    assert!(!over.within_capacity, "{found:?} {over:?}");
}

/// Quantized jobs are a population of their own, measured in both modes:
/// their likely range is theirs, not the decoders'.
#[test]
fn quantized_weights_have_a_measured_band_of_their_own() {
    for mode in ["training", "inference"] {
        let spec = Spec::from_value(&json!({"model": "llama-3.2-1b", "workload": {
            "mode": mode, "batch": 1, "seq_len": 1024, "dtype": "int4_dq",
            "training": {"lora": {"rank": 16}}}}))
        .unwrap();
        let band = band_for(&spec.model.arch, &spec.workload);
        assert_eq!(band.family, QUANTIZED_FAMILY, "{mode}");
        assert!(band.cases >= 4, "{mode}: {band:?}");
        assert_eq!(unmeasured_note(&band), None);
    }
    let bf16 = Spec::from_value(&json!({"model": "llama-3.2-1b", "workload": {
        "mode": "training", "batch": 1, "seq_len": 1024, "dtype": "bf16",
        "training": {"lora": {"rank": 16}}}}))
    .unwrap();
    assert_eq!(band_for(&bf16.model.arch, &bf16.workload).family, "decoder");
}

/// Paged optimizer state lives beside the allocator: the driver shows at
/// least 128 MiB for it (what NVML counted with 12.6 to 44 MB of state),
/// and the card's fit does not count it (it pages out rather than run out
/// of memory).
#[test]
fn paged_state_is_counted_beside_the_allocator() {
    let job = |optimizer: &str| {
        let spec = Spec::from_value(&json!({"model": "llama-3.2-1b", "workload": {
            "mode": "training", "batch": 4, "seq_len": 1024, "dtype": "int4_dq",
            "training": {"optimizer": optimizer, "precision": "amp_bf16", "grad_checkpointing": true,
                         "lora": {"rank": 16, "target_modules": ["all-linear"]}}}}))
        .unwrap();
        headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime).unwrap()
    };
    let paged = job("paged_adamw_8bit");
    let resident = job("adamw_8bit");
    // The allocator holds less (the large moments are paged) ...
    assert!(paged.reserved_peak.0 <= resident.reserved_peak.0);
    // ... and the driver sees the unified memory's block beside it.
    let beside = paged.driver_peak.0 - paged.reserved_peak.0 - paged.outside_allocator.0;
    assert_eq!(beside, headroom_core::estimate::UNIFIED_MEMORY_DEVICE_BYTES);
}

/// LLM.int8 loads its own cuBLASLt kernels: 66 MiB outside the allocator
/// that a 4-bit job of the same model does not have.
#[test]
fn eight_bit_matmuls_load_their_library() {
    let outside = |dtype: &str| {
        let spec = Spec::from_value(&json!({"model": "llama-3.2-1b", "workload": {
            "mode": "inference", "batch": 1, "seq_len": 512, "dtype": dtype,
            "inference": {"kind": "generate", "new_tokens": 8}}}))
        .unwrap();
        headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap()
            .outside_allocator
            .0
    };
    assert_eq!(
        outside("int8") - outside("int4_dq"),
        headroom_core::runtime::INT8_MATMUL_LIBRARY_BYTES
    );
}

/// What the model cannot describe is refused, naming the field: pure
/// bf16 training over a quantized base (its other parameters are fp32),
/// 8-bit training of a mixture of experts, a double-quantized KV cache.
#[test]
fn quantized_jobs_the_model_cannot_describe_are_refused_by_name() {
    let error = |spec: Value| match Spec::from_value(&spec) {
        Err(e) => e.to_string(),
        Ok(spec) => headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap_err()
            .to_string(),
    };
    let e = error(
        json!({"model": "llama-3.2-1b", "workload": {"mode": "training", "dtype": "int4_dq",
        "training": {"precision": "bf16", "lora": {"rank": 16}}}}),
    );
    assert!(
        e.contains("workload.training.precision") && e.contains("amp_bf16"),
        "{e}"
    );
    let e = error(
        json!({"model": "mixtral-8x7b", "workload": {"mode": "training", "dtype": "int8",
        "training": {"lora": {"rank": 16}}}}),
    );
    assert!(e.contains("workload.dtype") && e.contains("int4"), "{e}");
    let e = Spec::from_value(
        &json!({"model": "llama-3.2-1b", "workload": {"mode": "inference",
        "inference": {"kind": "generate", "kv_dtype": "int4_dq"}}}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("workload.inference.kv_dtype") && e.contains("\"int4\""),
        "{e}"
    );
}

/// A LoRA job that does not fit is told to quantize its base, keeping its
/// own adapters.
#[test]
fn qlora_advice_keeps_the_job_s_own_adapters() {
    let spec = Spec::from_value(
        &json!({"model": "llama-3.1-8b", "workload": {"mode": "training",
        "batch": 1, "seq_len": 4096, "dtype": "bf16",
        "training": {"precision": "bf16", "grad_checkpointing": true,
                     "lora": {"rank": 64, "target_modules": ["q_proj", "v_proj"]}}}}),
    )
    .unwrap();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let card = headroom_core::gpus::find("rtx-4090").unwrap();
    let advice = headroom_core::advice::advise(arch, w, rt, card, 0).unwrap();
    let qlora = advice
        .iter()
        .find(|s| s.change == headroom_core::advice::Change::Qlora)
        .unwrap_or_else(|| panic!("{advice:#?}"));
    let lora = qlora.workload.training.lora.as_ref().unwrap();
    assert_eq!((lora.rank, lora.target_modules.len()), (64, 2));
    assert!(!qlora.what.contains("rank"), "{}", qlora.what);
    assert!(qlora.driver_peak < card.usable_bytes);
}
