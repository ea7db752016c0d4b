//! What would make a job fit a card: golden suggestions for a few jobs,
//! and the property that every suggestion, applied, fits.
//! To accept new suggestions: `HEADROOM_BLESS=1 cargo test -p headroom-core --test it advice::`.
#![allow(clippy::field_reassign_with_default)]

use headroom_core::advice::{advise, Change};
use headroom_core::arch::Dtype;
use headroom_core::estimate::{estimate_with, EstimateOptions};
use headroom_core::gpus::{self, Gpu, CATALOG};
use headroom_core::search::decision_capacity;
use headroom_core::workload::{Attention, InferenceKind, Mode, Precision};
use headroom_core::{presets, RuntimeProfile, Workload};
use proptest::prelude::*;
use std::fmt::Write;
use std::path::PathBuf;

fn training(batch: u32, seq: u32, precision: Precision) -> Workload {
    let mut w = Workload::default();
    w.mode = Mode::Training;
    w.batch = batch;
    w.seq_len = seq;
    w.training.precision = precision;
    w
}

/// The jobs of the golden file: each too large for the card named.
fn golden_jobs() -> Vec<(&'static str, Workload, &'static str)> {
    let mut generate = Workload::default();
    generate.batch = 16;
    generate.seq_len = 16_384;
    generate.inference.kind = InferenceKind::Generate;
    generate.inference.new_tokens = 256;
    let mut eager = training(4, 2048, Precision::AmpBf16);
    eager.attention = Attention::Eager;
    let mut esmfold = Workload::default();
    esmfold.seq_len = 1024;
    esmfold.dtype = Dtype::Fp32;
    let mut resnet = training(512, 224, Precision::AmpBf16);
    resnet.image_size = Some(224);
    resnet.training.optimizer = headroom_core::workload::Optimizer::SgdMomentum;
    // Just over a T4: below this batch, freeing the caching allocator's
    // cache and retrying makes it fit.
    let mut resnet18 = resnet.clone();
    resnet18.batch = 1150;
    let mut beams = generate.clone();
    beams.batch = 4;
    beams.seq_len = 4096;
    beams.inference.new_tokens = 64;
    beams.inference.num_beams = 8;
    vec![
        (
            "llama-3.1-8b",
            training(4, 4096, Precision::AmpBf16),
            "h200",
        ),
        ("llama-3.2-1b", eager, "rtx-4090"),
        ("llama-3.1-8b", generate, "a100-40gb"),
        ("llama-3.1-8b", beams, "l40s"),
        ("esmfold-v1", esmfold, "rtx-4090"),
        ("resnet-50", resnet, "l4"),
        ("resnet-18", resnet18, "t4"),
    ]
}

fn render() -> String {
    let runtime = RuntimeProfile::h200();
    let mut out = String::new();
    for (id, w, card) in golden_jobs() {
        let arch = presets::find(id).unwrap().arch;
        let gpu = gpus::find(card).unwrap();
        let advice = advise(&arch, &w, &runtime, gpu, 0).unwrap();
        let _ = writeln!(
            out,
            "{id} {:?} batch {} length {} on {}:",
            w.mode,
            w.batch,
            w.length(arch.is_vision()),
            gpu.name
        );
        if advice.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for s in &advice {
            let _ = writeln!(
                out,
                "  {:?}: {} -> {} bytes",
                s.change, s.what, s.driver_peak
            );
        }
    }
    out
}

#[test]
fn suggestions_match_the_golden_file() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden-advice/advice.txt");
    let actual = render();
    if std::env::var_os("HEADROOM_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert_eq!(
        expected, actual,
        "suggestions differ (rerun with HEADROOM_BLESS=1 to accept)"
    );
}

#[test]
fn a_job_that_fits_gets_no_suggestion() {
    let arch = presets::find("gpt2").unwrap().arch;
    let w = training(2, 512, Precision::AmpBf16);
    let h200 = gpus::find("h200").unwrap();
    assert!(advise(&arch, &w, &RuntimeProfile::h200(), h200, 0)
        .unwrap()
        .is_empty());
}

/// Whether `w` (with `runtime`) fits `gpu` the way the GPU table decides.
fn fits(
    arch: &headroom_core::arch::Architecture,
    w: &Workload,
    runtime: &RuntimeProfile,
    gpu: &Gpu,
) -> bool {
    let capacity = decision_capacity(gpu, arch, w, runtime, 0);
    estimate_with(
        arch,
        w,
        runtime,
        EstimateOptions {
            capacity: Some(capacity),
            ..EstimateOptions::default()
        },
    )
    .unwrap()
    .fits
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_suggestion_applied_fits(
        id in prop::sample::select(vec!["gpt2", "llama-3.2-1b", "bert-base-uncased", "vit-b-16", "qwen2.5-0.5b"]),
        training_job in any::<bool>(),
        batch in 1u32..64,
        length in prop::sample::select(vec![512u32, 2048, 8192]),
        eager in any::<bool>(),
        beams in 1u32..9,
        card in 0usize..CATALOG.len(),
    ) {
        let arch = presets::find(id).unwrap().arch;
        let mut w = if training_job { training(batch, 1, Precision::AmpBf16) } else { Workload { batch, ..Workload::default() } };
        w = w.with_length(arch.is_vision(), if arch.is_vision() { 224 } else { length });
        if eager { w.attention = Attention::Eager; }
        if matches!(arch, headroom_core::arch::Architecture::Decoder(_)) { w.inference.num_beams = beams; }
        let runtime = RuntimeProfile::h200();
        let gpu = &CATALOG[card];
        let Ok(advice) = advise(&arch, &w, &runtime, gpu, 0) else { return Ok(()) };
        let mut last = None;
        for s in &advice {
            prop_assert!(fits(&arch, &s.workload, &s.runtime, gpu), "{id} {:?} on {}", s.change, gpu.name);
            prop_assert!(last.is_none_or(|l: Change| l <= s.change), "ranked");
            last = Some(s.change);
        }
        if fits(&arch, &w, &runtime, gpu) {
            prop_assert!(advice.is_empty());
        }
    }
}

/// The most common job there is, Llama 3.1 8B full fine-tuning through the
/// HF `Trainer` (`bf16=True`, batch 4, 4,096 tokens), fits neither an H100
/// nor an RTX 4090, and no single change makes it fit either: the advice
/// combines changes until one fits, ranked by what they cost.
#[test]
fn combinations_reach_an_answer_for_the_trainer_s_llama_8b() {
    let spec = headroom_core::readers::Spec::from_json(
        r#"{"model":"llama-3.1-8b","workload":{"framework":"hf_trainer","seq_len":4096,
            "training_args":{"per_device_train_batch_size":4,"bf16":true}}}"#,
    )
    .unwrap();
    let (arch, w, rt) = (&spec.model.arch, &spec.workload, &spec.runtime);
    let h100 = gpus::find("h100-80gb").unwrap();
    let advice = advise(arch, w, rt, h100, 0).unwrap();
    let changes: Vec<Change> = advice.iter().map(|s| s.change).collect();
    assert_eq!(changes, [Change::Lora, Change::MoreGpus], "{advice:#?}");
    assert!(advice
        .iter()
        .all(|s| s.workload.training.grad_checkpointing));
    assert!(advice[0].what.contains("lora") && advice[0].what.contains("grad_checkpointing"));
    assert_eq!(advice[1].workload.parallel.world_size, 4);

    // On a 24 GB card LoRA's bf16 base does not fit at all: QLoRA's 4-bit
    // base does, or FSDP2 over several cards.
    let rtx4090 = gpus::find("rtx-4090").unwrap();
    let advice = advise(arch, w, rt, rtx4090, 0).unwrap();
    let changes: Vec<Change> = advice.iter().map(|s| s.change).collect();
    assert_eq!(changes, [Change::Qlora, Change::MoreGpus], "{advice:#?}");
    let qlora = &advice[0];
    assert_eq!(qlora.workload.dtype, headroom_core::arch::Dtype::Int4Dq);
    assert!(qlora.what.contains("int4_dq") && qlora.what.contains("paged_adamw_8bit"));
    assert!(
        qlora.driver_peak < rtx4090.usable_bytes,
        "{}",
        qlora.driver_peak
    );
    let fsdp2 = &advice[1];
    assert_eq!(fsdp2.change, Change::MoreGpus);
    // Each rank takes part of the batch, the ranks together at least all of it.
    assert!(fsdp2.workload.batch * fsdp2.workload.parallel.world_size >= 4);
    assert!(fsdp2.what.contains("per rank"), "{}", fsdp2.what);
}
