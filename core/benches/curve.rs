//! Times 256-point peak-vs-sequence-length curves (`cargo bench -p headroom-core`).
//!
//! Each curve is computed `ROUNDS` times; the median is reported. Target:
//! under 5 ms per curve on the development machine (2 cores).
#![allow(clippy::field_reassign_with_default)]

use headroom_core::parallel::Strategy;
use headroom_core::search::{curve, lengths};
use headroom_core::workload::{InferenceKind, Mode};
use headroom_core::{presets, RuntimeProfile, Workload};
use std::time::Instant;

const ROUNDS: usize = 21;

fn time_curve(label: &str, id: &str, workload: &Workload, max_len: u32) -> f64 {
    let arch = presets::find(id).expect("preset").arch;
    let runtime = RuntimeProfile::h200();
    let lens = lengths(128, max_len, 256, true);
    assert_eq!(lens.len(), 256, "256 distinct lengths");
    let mut times = Vec::with_capacity(ROUNDS);
    let mut last_peak = 0;
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let points = curve(&arch, workload, &runtime, &lens).expect("curve");
        times.push(start.elapsed().as_secs_f64() * 1e3);
        last_peak = points.last().map(|p| p.estimate.driver_peak.0).unwrap_or(0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let median = times[ROUNDS / 2];
    println!(
        "{label:40} 256 points  median {median:8.2} ms  min {:8.2} ms  (peak at {max_len}: {:.1} GB)",
        times[0],
        last_peak as f64 / 1e9
    );
    median
}

fn main() {
    let mut train = Workload::default();
    train.mode = Mode::Training;
    train.batch = 1;
    time_curve(
        "llama-3.1-8b training (amp_bf16, AdamW)",
        "llama-3.1-8b",
        &train,
        32_768,
    );

    // The page's opening curve (web/src/defaults.rs): Llama-3.1-8B bf16
    // generation of 16 tokens, batch 2 (the browser test varies the batch).
    let mut page = Workload::default();
    page.dtype = headroom_core::arch::Dtype::Bf16;
    page.batch = 2;
    time_curve(
        "llama-3.1-8b generate (page default, b2)",
        "llama-3.1-8b",
        &page,
        131_072,
    );

    let mut infer = Workload::default();
    infer.mode = Mode::Inference;
    infer.inference.kind = InferenceKind::Generate;
    infer.inference.new_tokens = 16;
    time_curve(
        "mixtral-8x7b generate (bf16, 16 tokens)",
        "mixtral-8x7b",
        &infer,
        131_072,
    );

    // One rank of a job on several GPUs against the same job on one GPU:
    // the per-rank replay adds FSDP2's gathers and reductions (target: at
    // most twice the single-GPU estimate's cost).
    let mut fp32 = Workload::default();
    fp32.mode = Mode::Training;
    fp32.training.precision = headroom_core::workload::Precision::Fp32;
    let single = time_curve(
        "llama-3.1-8b training (fp32, 1 GPU)",
        "llama-3.1-8b",
        &fp32,
        32_768,
    );
    let mut fsdp2 = fp32.clone();
    fsdp2.parallel.strategy = Strategy::Fsdp2;
    fsdp2.parallel.world_size = 8;
    let rank = time_curve(
        "llama-3.1-8b training (fsdp2 x8, per rank)",
        "llama-3.1-8b",
        &fsdp2,
        32_768,
    );
    println!(
        "per-rank estimate cost: {:.2}x the single-GPU one (target at most 2x)",
        rank / single
    );
}
