//! Jobs with int8/int4 (bitsandbytes) weights are not measured: their
//! likely range says so and holds the QLoRA peaks measured blind
//! (`measurements/qlora/README.md`), where the measured decoder band did
//! not (11.63 to 11.87 GB for a job that peaked at 15.58 GB).

use headroom_core::arch::Dtype;
use headroom_core::spec::Spec;
use headroom_core::uncertainty::{band_for, likely_range, unmeasured_note, QUANTIZED_FAMILY};

fn qlora(model: &str, batch: u32, dtype: &str) -> Spec {
    Spec::from_json(&format!(
        r#"{{"model":"{model}","workload":{{"mode":"training","batch":{batch},"seq_len":2048,"dtype":"{dtype}",
            "training":{{"optimizer":"paged_adamw_8bit","precision":"amp_bf16","grad_checkpointing":true,
            "lora":{{"rank":16,"alpha":32,"target_modules":["all-linear"],"dropout":0.05}}}}}}}}"#
    ))
    .unwrap()
}

#[test]
fn the_qlora_peaks_measured_blind_lie_in_the_range() {
    for (model, batch, measured) in [
        ("llama-3.1-8b", 1, 15_580_000_000u64),
        ("llama-3.2-1b", 8, 38_470_000_000),
    ] {
        let spec = qlora(model, batch, "int4_dq");
        let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
        let e = headroom_core::estimate(arch, w, rt).unwrap();
        let range = likely_range(arch, w, e.driver_peak, e.outside_allocator, true);
        assert_eq!(range.band.family, QUANTIZED_FAMILY);
        assert_eq!(range.band.cases, 0);
        assert!(unmeasured_note(&range.band).unwrap().contains("fp32"));
        assert!(
            range.contains(measured),
            "{model}: {measured} not in {:?}..{:?}",
            range.low,
            range.high
        );
    }
}

#[test]
fn only_quantized_weights_get_the_unmeasured_band() {
    let bf16 = qlora("llama-3.2-1b", 1, "bf16");
    let band = band_for(&bf16.model.arch, &bf16.workload);
    assert_eq!(band.family, "decoder");
    assert!(band.cases > 0);
    assert_eq!(unmeasured_note(&band), None);
    let int8 = qlora("llama-3.2-1b", 1, "int8");
    assert_eq!(int8.workload.dtype, Dtype::Int8);
    let band = band_for(&int8.model.arch, &int8.workload);
    assert_eq!(band.family, QUANTIZED_FAMILY);
    assert!(band.lowest < -0.05, "{band:?}");
}
