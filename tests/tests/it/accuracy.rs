//! Accuracy of the driver-level peak against real H200 measurements.
//!
//! The headline bounds: median absolute error at most 3%, no case worse than
//! 8%, none predicted more than 5% below its measurement (an under-estimate
//! is an out-of-memory error). Some sets are held tighter, a few known misses
//! are named, and the convolutional training sets are regression guards.
//! `docs/accuracy.md` (`scripts/accuracy-doc.sh`) shows every case.

use headroom_tests::{compare_file, public_measurements, Compared};

struct Summary {
    cases: usize,
    median: f64,
    p90: f64,
    max: f64,
    under_5pct: usize,
}

fn summarise(rows: &[&Compared]) -> Summary {
    let mut errs: Vec<f64> = rows.iter().map(|r| r.error().abs() * 100.0).collect();
    errs.sort_by(f64::total_cmp);
    // Linear interpolation between order statistics (the median of an even
    // count is the mean of the middle two).
    let pick = |q: f64| {
        let pos = (errs.len() as f64 - 1.0) * q;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        errs[lo] + (errs[hi] - errs[lo]) * (pos - lo as f64)
    };
    Summary {
        cases: rows.len(),
        median: pick(0.5),
        p90: pick(0.9),
        max: *errs.last().unwrap(),
        under_5pct: rows.iter().filter(|r| r.error() < -0.05).count(),
    }
}

fn report(rows: &[&Compared]) {
    for r in rows {
        println!(
            "{:52} pred {:>7.3} GB meas {:>7.3} GB err {:>+6.1}%  reserved {:>7.3}/{:>7.3}  alloc {:>7.3}/{:>7.3}",
            r.case,
            r.predicted as f64 / 1e9,
            r.measured as f64 / 1e9,
            100.0 * r.error(),
            r.reserved.0 as f64 / 1e9,
            r.reserved.1 as f64 / 1e9,
            r.allocated.0 as f64 / 1e9,
            r.allocated.1 as f64 / 1e9,
        );
    }
}

#[track_caller]
fn check_bounds(
    label: &str,
    rows: &[&Compared],
    median_bound: f64,
    max_bound: f64,
    under_allowed: usize,
) {
    assert!(!rows.is_empty(), "{label}: no cases");
    report(rows);
    let s = summarise(rows);
    println!(
        "{label}: cases={} median_abs_err={:.1}% p90_abs_err={:.1}% max_abs_err={:.1}% under_5pct={}",
        s.cases, s.median, s.p90, s.max, s.under_5pct
    );
    assert!(
        s.median <= median_bound,
        "{label}: median {:.1}% > {median_bound}%",
        s.median
    );
    assert!(
        s.max <= max_bound,
        "{label}: max {:.1}% > {max_bound}%",
        s.max
    );
    assert!(
        s.under_5pct <= under_allowed,
        "{label}: {} cases more than 5% under",
        s.under_5pct
    );
}

fn public() -> Vec<Compared> {
    let (rows, skipped) = compare_file(&public_measurements());
    assert!(skipped.is_empty(), "skipped public cases: {skipped:?}");
    rows
}

/// Every transformer case of the public file, within the headline bounds
/// but one, named: BERT b32 L128 inference. Its allocated peak is the
/// replay's to 47 KB, and a fresh process reserves what the model predicts
/// for the same job (the validation set's `bert_base_inf_fp32_b32_L128_repro`,
/// +0.5%), but the public process, which had trained before, reserved
/// 178 MB less than that (`docs/decisions/bert-embedding-output.md`): an
/// over-estimate of 9.4% as a fresh build, held here under 10%. Replayed
/// after the builds its process ran first it is exact (below).
#[test]
fn public_transformer_cases_meet_the_bounds() {
    let rows = public();
    let known = "bert_base_inf_fp32_b32_L128";
    let (misses, picked): (Vec<&Compared>, Vec<&Compared>) = rows
        .iter()
        .filter(|r| r.model != "esmfold-v1" && r.model != "resnet-50")
        .partition(|r| r.case == known);
    assert_eq!(picked.len(), 13);
    check_bounds("transformers", &picked, 3.0, 8.0, 0);
    let [miss] = misses[..] else {
        panic!("{known} not in the public file")
    };
    let allocated_error = miss.allocated.0 as f64 / miss.allocated.1 as f64 - 1.0;
    assert!(
        allocated_error.abs() < 0.001,
        "{known} allocated {allocated_error:+e}"
    );
    assert!(
        (0.0..=0.10).contains(&miss.error()),
        "{known}: {:+.1}%",
        100.0 * miss.error()
    );
}

/// The ESMFold cases of the public file, within the headline bounds.
#[test]
fn public_esmfold_cases_meet_the_bounds() {
    let rows = public();
    let picked: Vec<&Compared> = rows.iter().filter(|r| r.model == "esmfold-v1").collect();
    assert_eq!(picked.len(), 8);
    check_bounds("esmfold", &picked, 3.0, 8.0, 0);
}

/// The ResNet-50 cases, with the cuDNN workspaces measured per
/// convolution (`measurements/h200-cudnn/`); both ran in a process that
/// had trained before (two cuBLAS workspaces resident).
#[test]
fn public_resnet_cases_meet_the_bounds() {
    let rows = public();
    let picked: Vec<&Compared> = rows.iter().filter(|r| r.model == "resnet-50").collect();
    assert_eq!(picked.len(), 2);
    check_bounds("resnet-50", &picked, 3.0, 8.0, 0);
}

/// The headline bounds over ESMFold and ResNet-50 together.
#[test]
fn public_esmfold_and_resnet_cases_together_meet_the_bounds() {
    let rows = public();
    let picked: Vec<&Compared> = rows
        .iter()
        .filter(|r| r.model == "esmfold-v1" || r.model == "resnet-50")
        .collect();
    assert_eq!(picked.len(), 10);
    check_bounds("esmfold + resnet-50", &picked, 3.0, 8.0, 0);
}

/// Regression guard on the H200 validation set measured for this project
/// (`measurements/h200/validation.jsonl`, 40 cases; each inference case
/// records whether its process had run a backward pass before).
#[test]
fn validation_set_regression_guard() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/h200/validation.jsonl");
    let text = std::fs::read_to_string(path).expect("measurements/h200/validation.jsonl");
    let (rows, skipped) = compare_file(&text);
    assert!(skipped.is_empty(), "skipped: {skipped:?}");
    let all: Vec<&Compared> = rows.iter().collect();
    report(&all);
    let s = summarise(&all);
    println!(
        "validation: cases={} median_abs_err={:.1}% p90_abs_err={:.1}% max_abs_err={:.1}% under_5pct={}",
        s.cases, s.median, s.p90, s.max, s.under_5pct
    );
    assert_eq!(s.cases, 40);
    assert!(s.median <= 1.0, "median {:.1}%", s.median);
    assert!(s.p90 <= 4.0, "p90 {:.1}%", s.p90);
    // BERT fp32 training after amp training was -8.7% until the earlier
    // job was replayed as its process's first and the later one took the
    // workspaces it left (trace 29 of the generalization set): +0.1%.
    assert!(s.max <= 3.0, "max {:.1}%", s.max);
    assert_eq!(s.under_5pct, 0, "under by more than 5%");
}

/// Mixtral-8x7B generation on the H200 (`measurements/h200/mixtral.jsonl`):
/// the MoE path within the headline bounds.
#[test]
fn mixtral_generation_within_bounds() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../measurements/h200/mixtral.jsonl");
    let text = std::fs::read_to_string(path).expect("measurements/h200/mixtral.jsonl");
    let (rows, skipped) = compare_file(&text);
    assert!(skipped.is_empty(), "skipped: {skipped:?}");
    let all: Vec<&Compared> = rows.iter().collect();
    assert_eq!(all.len(), 2);
    check_bounds("mixtral", &all, 3.0, 8.0, 0);
}

/// The generalization batches (`measurements/h200-generalization/`): 108
/// new shapes, each predicted before it was measured. Every mechanism the
/// transformer misses exposed is now modelled, and the headline bounds (median
/// 3%, none worse than 8%, none under by more than 5%) hold for them; the
/// convolutional training cases are only guarded against regressions:
/// cuDNN's per-shape algorithm choices move their blocks (ResNet-18 amp
/// b128 -9.6%: two kernels whose workspaces are 8 and 1.5 MiB larger than
/// modelled; ResNet-50 fp32 b32 +0.1% since the in-place ReLU and residual
/// gradients were traced, -5.9% before).
#[test]
fn generalization_sets_meet_the_bounds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/h200-generalization");
    let mut rows = Vec::new();
    for name in [
        "measured.jsonl",
        "measured-2.jsonl",
        "measured-3.jsonl",
        "measured-4.jsonl",
        "measured-5.jsonl",
        "measured-6.jsonl",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).expect("generalization file");
        let (mut file_rows, skipped) = compare_file(&text);
        assert!(skipped.is_empty(), "{name}: skipped {skipped:?}");
        rows.append(&mut file_rows);
    }
    assert_eq!(rows.len(), 108);
    let convolutional =
        |r: &&Compared| r.case.starts_with("resnet") || r.case.starts_with("mobilenet");
    let transformers: Vec<&Compared> = rows.iter().filter(|r| !convolutional(r)).collect();
    let cnn: Vec<&Compared> = rows.iter().filter(|r| convolutional(r)).collect();
    check_bounds("generalization (transformers)", &transformers, 3.0, 8.0, 0);
    check_bounds("generalization (convolutional)", &cnn, 5.0, 12.0, 1);
}

/// The rows of one generalization file, which must hold `expected` cases.
fn generalization_rows(name: &str, expected: usize) -> Vec<Compared> {
    measured_rows(&format!("h200-generalization/{name}"), expected)
}

/// The text of a file under `measurements/`.
fn measurement_text(file: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// Every case of a file under `measurements/`, none skipped, `expected` of
/// them.
fn measured_rows(file: &str, expected: usize) -> Vec<Compared> {
    let (rows, skipped) = compare_file(&measurement_text(file));
    assert!(skipped.is_empty(), "{file}: skipped {skipped:?}");
    assert_eq!(rows.len(), expected, "{file}");
    rows
}

/// Generalization batch 7 (`measured-7.jsonl`, 21 shapes predicted before
/// they were measured; `predicted-before-measuring-7.txt`), held to
/// tighter bounds than the headline ones. BERT fp16 inference, -5.1% as
/// predicted, is +0.1% since BERT holds `embedding_output` through the
/// encoder and the MLM head `sequence_output` (`encoder.rs`); BERT fp32 SDPA
/// training, -8.4% as predicted, is +0.3% since the tied embedding's
/// gradients are summed out of place, as the traces show.
#[test]
fn generalization_batch_7_guard() {
    let rows = generalization_rows("measured-7.jsonl", 21);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("generalization batch 7", &all, 1.0, 3.0, 0);
}

/// Generalization batches 8 to 10, each predicted before it was measured
/// (`predicted-before-measuring-N.txt`) and checked with its process
/// history as the harness ran it: held to tighter bounds than the headline ones.
/// Batch 8's one miss as predicted (ViT bf16 inference +7.7%) was
/// torchvision's MHA fast path and the patch embedding's workspace; batch
/// 9's (Mistral-7B eager fp16 generation +20.4%) CUDA's half-to-float
/// softmax; batch 10 (half-precision eager attention) came in as
/// predicted. BERT fp32 inference b16 L512 (batch 9) went from -3.4% to
/// +0.4% with BERT's `embedding_output` lifetime; GPT-2 eager fp16
/// generation b8 (+3.2%, batch 10) has its allocated peak within 1.3 MB,
/// the rest is 50 MB of segment slack.
#[test]
fn generalization_batches_8_to_10_hold_tight_bounds() {
    for (name, cases, max) in [
        ("measured-8.jsonl", 24, 3.0),
        ("measured-9.jsonl", 22, 3.0),
        ("measured-10.jsonl", 9, 4.0),
    ] {
        let rows = generalization_rows(name, cases);
        let all: Vec<&Compared> = rows.iter().collect();
        check_bounds(name, &all, 1.0, max, 0);
    }
}

/// Generalization batch 11 (ESMFold: chunk sizes 16 to 256 up to 1,536
/// residues, the fp32 stem, one recycle; ViT-B/16 at 384 px), predicted
/// before it was measured (`predicted-before-measuring-11.txt`) and run in
/// two calls (`measured-11.jsonl`, then the five ESMFold shapes the first
/// call's group timeout left, `measured-11b.jsonl`). As predicted ESMFold
/// came out 0.3-2.9% over; since the trunk keeps the sequence attention's
/// probabilities for the block and frees the pass input early (the public
/// snapshot's lifetimes), -1.2..+0.4%. The model also reproduces that
/// chunk 32 and chunk 128 reserve the same at 1,024 residues and chunk 64
/// 2.1 GB more.
#[test]
fn generalization_batch_11_esmfold_and_vit_384_hold() {
    let mut rows = generalization_rows("measured-11.jsonl", 10);
    rows.extend(generalization_rows("measured-11b.jsonl", 5));
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("generalization batch 11", &all, 1.0, 2.0, 0);
    let chunk = |c: &str| {
        let r = rows
            .iter()
            .find(|r| r.case == format!("esmfold_esm_fp16_chunk{c}_L1024"));
        r.map(|r| r.predicted).expect("case")
    };
    assert_eq!(
        chunk("32"),
        chunk("128"),
        "chunk 32 and 128 reserve the same"
    );
    assert!(
        chunk("64") > chunk("32") + 2_000_000_000,
        "chunk 64 needs 2 GB more"
    );
}

/// Generalization batch 12: seven ESMFold shapes predicted after the
/// lifetime fixes of batch 11 (`predicted-before-measuring-12.txt`: chunk
/// 8 to 512, unchunked 1,152 residues, no recycle, the fp32 stem), all
/// within 1.2%.
#[test]
fn generalization_batch_12_esmfold_holds() {
    let rows = generalization_rows("measured-12.jsonl", 7);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("generalization batch 12", &all, 1.0, 2.0, 0);
}

/// Generalization batch 13: full pure-bf16 training of Llama-3.1-8B,
/// Qwen2.5-7B and Mistral-7B (AdamW and SGD with momentum, 53 to 88 GB),
/// predicted before it was measured (`predicted-before-measuring-13.txt`),
/// all within 0.7%.
#[test]
fn generalization_batch_13_large_bf16_training_holds() {
    let rows = generalization_rows("measured-13.jsonl", 4);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("generalization batch 13", &all, 1.0, 1.5, 0);
}

/// Batch 14 (`measured-14.jsonl`): twelve convolutional training shapes
/// (ResNet-18/50/101 and MobileNetV2; fp32, amp and pure bf16; SGD, SGD
/// with momentum and AdamW; 224 to 448 px; batch 32 to 256) and a ViT
/// control, predicted before they were measured
/// (`predicted-before-measuring-14.txt`). Allocated peaks are within 1.6%
/// (ResNets within 0.3%); reserved memory follows cuDNN's per-shape
/// weight-gradient blocks, which the model does not: ResNet-18 fp32 at 448
/// px -7.0%, at batch 256 -5.3% (-15% before the stem's weight-gradient
/// block was modelled). A regression guard, not a bound the model meets.
#[test]
fn generalization_batch_14_convolutional_training_guard() {
    let rows = generalization_rows("measured-14.jsonl", 13);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("generalization batch 14", &all, 3.5, 8.0, 2);
}

/// Jobs on several GPUs, one rank's peak: DDP, ZeRO-1 and FSDP2 with a
/// one-rank NCCL process group on an H200
/// (`measurements/h200-parallel/measured-w1.jsonl`, and
/// `measured-w1-2.jsonl`, predicted before it was measured) and FSDP2 on two
/// H200s (`measurements/public/h200x2-fsdp2-public.jsonl`). Every case
/// within 3% of its driver peak, none more than 3% under, but two DDP runs
/// in which the reducer's first bucket outlived its rebuild at the second
/// forward (repeats of the same jobs did not): under by one flat copy of
/// the gradients in allocated memory, which the model does not follow.
/// ZeRO-1 with checkpointing (b4 L1024, both runs) is pinned to its
/// reserved peak: it was 2.1 GB under until the reducer's rebuilt buckets
/// followed the order gradients became ready, which puts layer 0's norm
/// weight in the embedding's bucket (8 KiB too large for the free
/// embedding-sized blocks, as the trace shows).
#[test]
fn several_gpu_cases_meet_the_bounds() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../measurements");
    let mut rows = Vec::new();
    for file in [
        "h200-parallel/measured-w1.jsonl",
        "h200-parallel/measured-w1-2.jsonl",
        "public/h200x2-fsdp2-public.jsonl",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let (done, skipped) = compare_file(&text);
        assert!(skipped.is_empty(), "{file}: skipped {skipped:?}");
        rows.extend(done);
    }
    assert_eq!(rows.len(), 24, "cases in the three files");
    let bucket_survived = [
        "llama1b_ddp_w1_amp_bf16_b4_L2048_ckpt0_view",
        "llama1b_ddp_w1_amp_bf16_b2_L4096_ckpt1",
    ];
    let zero1_checkpointed = [
        "llama1b_zero1_w1_amp_bf16_b4_L1024_ckpt1",
        "llama1b_zero1_w1_amp_bf16_b4_L1024_ckpt1_run2",
    ];
    let gradients = 4 * 1_235_814_400_u64;
    report(&rows.iter().collect::<Vec<_>>());
    for r in &rows {
        if bucket_survived.contains(&r.case.as_str()) {
            let missing = r.allocated.1 - r.allocated.0;
            assert!(
                missing.abs_diff(gradients) <= 2 << 20,
                "{}: allocated under by {missing}, not one gradient copy",
                r.case
            );
            continue;
        }
        if zero1_checkpointed.contains(&r.case.as_str()) {
            assert!(
                r.reserved.0.abs_diff(r.reserved.1) <= 64 << 20,
                "{}: reserved {} predicted, {} measured",
                r.case,
                r.reserved.0,
                r.reserved.1
            );
        }
        assert!(
            r.error().abs() <= 0.03,
            "{}: {:+.1}%",
            r.case,
            100.0 * r.error()
        );
    }
}

/// The same one-rank DDP job run 17 more times in fresh processes
/// (`measurements/h200-parallel/ddp-bucket/measured-cold.jsonl`, the first
/// three on a freshly started machine, and `measured-repeats.jsonl`, with
/// and without `TORCH_NCCL_AVOID_RECORD_STREAMS`): two outcomes only, each
/// to the byte. 15 runs free the old bucket at the rebuild, as the model
/// does (within 0.1%); 2 keep it, under by exactly one flat copy of the
/// gradients in allocated memory, and inside the likely range.
#[test]
fn ddp_repeats_have_two_outcomes_and_the_range_holds_both() {
    let gradients = 4 * 1_235_814_400_u64;
    let mut kept = Vec::new();
    let mut runs = 0;
    for file in ["measured-cold.jsonl", "measured-repeats.jsonl"] {
        let text = measurement_text(&format!("h200-parallel/ddp-bucket/{file}"));
        let (rows, skipped) = compare_file(&text);
        assert!(skipped.is_empty(), "{file}: skipped {skipped:?}");
        for r in rows {
            runs += 1;
            if r.error().abs() <= 0.001 {
                continue;
            }
            let missing = r.allocated.1 - r.allocated.0;
            assert!(
                missing.abs_diff(gradients) <= 2 << 20,
                "{}: allocated under by {missing}, not one gradient copy",
                r.case
            );
            kept.push(r.case);
        }
    }
    assert_eq!(runs, 17);
    assert_eq!(
        kept,
        [
            "ddp_b2_L4096_ckpt1_warm_a",
            "ddp_b2_L4096_ckpt1_record_streams_1"
        ]
    );
    let text = measurement_text("h200-parallel/ddp-bucket/measured-cold.jsonl");
    let line = text.lines().nth(1).expect("the run that kept the bucket");
    let measured: serde_json::Value = serde_json::from_str(line).expect("line");
    let spec = headroom_core::spec::Spec::from_json(line).expect("spec");
    let est = headroom_core::estimate::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
        .expect("estimate");
    let range = headroom_core::uncertainty::likely_range(
        &spec.model.arch,
        &spec.workload,
        est.driver_peak,
        est.outside_allocator,
        true,
    );
    let peak = measured["measured"]["driver_peak"].as_u64().unwrap();
    assert!(
        range.high.0 >= peak,
        "the likely range ends at {} B, below the kept bucket's peak {peak} B",
        range.high.0
    );
}

/// The comparison of one named case of a file under `measurements/`.
fn measured_case(file: &str, case: &str) -> Compared {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements")
        .join(file);
    let text = std::fs::read_to_string(path).expect(file);
    let (rows, _) = compare_file(&text);
    rows.into_iter().find(|r| r.case == case).expect(case)
}

/// Autocast caches a leaf weight's bf16 cast whatever the grad mode, so a
/// non-reentrant checkpointed forward keeps every layer's casts until the
/// autocast region ends (the H200 trace of ZeRO-1 b4 L1024 with
/// checkpointing: 96 32 MiB, 64 8 MiB and 64 2 MiB casts freed at
/// `autocast.__exit__` over its two steps). Pinned to the reserved peaks of
/// the checkpointed amp jobs, which were 1.5% to 3.2% under while the
/// replay freed each cast after its matmul.
#[test]
fn checkpointed_autocast_jobs_keep_their_weight_casts() {
    let pinned = [
        (
            "h200/validation.jsonl",
            "llama1b_train_amp_bf16_gradckpt_b8_L4096",
        ),
        (
            "h200-generalization/measured-2.jsonl",
            "gpt2_train_amp_bf16_adamw_gradckpt_b16_L1024",
        ),
        (
            "h200-generalization/measured-5.jsonl",
            "bert_base_train_amp_bf16_adamw_gradckpt_b32_L512",
        ),
        (
            "h200-generalization/measured-7.jsonl",
            "llama1b_train_amp_bf16_adamw_gradckpt_b16_L2048",
        ),
        (
            "h200-parallel/measured-w1-2.jsonl",
            "llama3b_zero1_w1_amp_bf16_b2_L1024_ckpt1",
        ),
        ("real-jobs/measured.jsonl", "trainer_llama1b_gc_b8_L2048"),
    ];
    for (file, case) in pinned {
        let r = measured_case(file, case);
        let off = r.reserved.0 as f64 / r.reserved.1 as f64 - 1.0;
        assert!(
            off.abs() <= 0.005,
            "{case}: reserved {:+.2}% ({} predicted, {} measured)",
            100.0 * off,
            r.reserved.0,
            r.reserved.1
        );
    }
}

/// `BertModel.forward` keeps `embedding_output` in a local while the
/// encoder runs, and `BertForMaskedLM.forward` keeps `sequence_output`
/// while the masked-LM head runs. Pinned to the public pair's allocated
/// peaks, which were one and four `b x L x 768` fp32 tensors above the
/// replay's while it freed them early (now 47,104 B under each), and to the
/// fresh-process BERT inference jobs whose driver-level peaks were 2% to
/// 10.6% under (a base model with no head; fp16, bf16 and fp32):
/// all within 0.6%.
#[test]
fn bert_keeps_its_embedding_and_sequence_outputs() {
    for r in public().iter().filter(|r| r.model == "bert-base-uncased") {
        let under = r.allocated.1 as i64 - r.allocated.0 as i64;
        assert!(
            (0..65_536).contains(&under),
            "{}: allocated {} predicted, {} measured",
            r.case,
            r.allocated.0,
            r.allocated.1
        );
    }
    let pinned = [
        ("real-jobs/measured.jsonl", "embed_bert_b64_L512"),
        (
            "h200-generalization/measured-7.jsonl",
            "bert_base_inf_fp16_b64_L512",
        ),
        (
            "h200-generalization/measured-3.jsonl",
            "bert_base_inf_bf16_b128_L128",
        ),
        (
            "h200-generalization/measured.jsonl",
            "bert_base_inf_fp32_b64_L256",
        ),
        (
            "h200-generalization/measured-9.jsonl",
            "bert_base_inf_fp32_b16_L512",
        ),
        ("h200/validation.jsonl", "bert_base_inf_fp32_b32_L128_repro"),
    ];
    for (file, case) in pinned {
        let r = measured_case(file, case);
        assert!(
            r.error().abs() <= 0.006,
            "{case}: {:+.2}% ({} predicted, {} measured)",
            100.0 * r.error(),
            r.predicted,
            r.measured
        );
    }
}

/// The real-job suite (`measurements/real-jobs/measured.jsonl`): nine jobs
/// written the way users write them (HF `Trainer` with its fused AdamW,
/// Lightning, timm, `generate()`, sentence embeddings), measured through
/// `headroom run --cmd`. Every job within 3.5% (the BERT
/// embeddings, -10.6% before `BertModel` held its embedding output through
/// the encoder, +0.1%; timm ResNet-50 in NCHW, -7.0% before the stem's
/// weight-gradient block was modelled, -3.2%; in `channels_last`, +1.2%
/// predicted as NCHW, +0.2%).
#[test]
fn real_jobs_meet_the_bounds() {
    let rows = measured_rows("real-jobs/measured.jsonl", 9);
    for r in &rows {
        assert!(
            r.error().abs() * 100.0 <= 3.5,
            "{}: {:+.1}% (limit 3.5%)",
            r.case,
            r.error() * 100.0
        );
    }
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("real jobs", &all, 1.5, 3.5, 0);
}

/// The public set's shapes that fit 80 GB, measured on an H100 80GB HBM3
/// with `headroom run` as a user runs it
/// (`calibration/runs/h100-2026-12-07/`), predicted with the built-in
/// (H200) runtime and with the profile `calibrate` fitted there
/// (`calibration/profiles/h100-2026-12-07.json`): blind, median 0.1% and
/// worst 1.1%; fitted, median 0.0%, worst 1.1% (ESMFold at 64 residues
/// both ways).
#[test]
fn h100_public_shapes_meet_the_bounds_blind_and_fitted() {
    let runs = "../calibration/runs/h100-2026-12-07";
    let text = [
        runs.to_string() + "/public.jsonl",
        runs.to_string() + "/public2.jsonl",
    ]
    .map(|f| measurement_text(&f))
    .join("\n");
    let (blind, skipped) = compare_file(&text);
    assert!(skipped.is_empty(), "skipped {skipped:?}");
    assert_eq!(blind.len(), 23);
    let all: Vec<&Compared> = blind.iter().collect();
    check_bounds("H100 public shapes, blind", &all, 1.0, 3.0, 0);

    let profile_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../calibration/profiles/h100-2026-12-07.json");
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(profile_path).unwrap()).unwrap();
    let mut fitted = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut case: serde_json::Value = serde_json::from_str(line).unwrap();
        let runtime = case["runtime"].as_object_mut().unwrap();
        for (key, coefficient) in profile["coefficients"].as_object().unwrap() {
            runtime.insert(key.clone(), coefficient["value"].clone());
        }
        fitted.push(case.to_string());
    }
    let (fitted, skipped) = compare_file(&fitted.join("\n"));
    assert!(skipped.is_empty(), "skipped {skipped:?}");
    let all: Vec<&Compared> = fitted.iter().collect();
    check_bounds("H100 public shapes, the H100 profile", &all, 1.0, 3.0, 0);
}

/// A model cast in place between two jobs (`model.half()` after fp32
/// inference) is replayed as the cast: parameter by parameter the fp16 copy
/// is made, then the fp32 block freed, then the cache emptied. Pinned to
/// the H200 measurement of ESM-2 650M (`measurements/h200-history/`): the
/// three fp16 jobs' reserved peaks within 1% (the job after the cast had
/// been replayed with the fp32 weights freed all at once on the fp16
/// job's first request and no cache emptied: 3.26 GB against 2.06 GB).
#[test]
fn a_model_cast_in_place_between_jobs_is_replayed_as_a_cast() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/h200-history/esm2-half-after-fp32.jsonl");
    let text = std::fs::read_to_string(path).expect("esm2-half-after-fp32.jsonl");
    let measured: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let spec = |dtype: &str, batch: u32, length: u32| {
        headroom_core::spec::Spec::from_json(&format!(
            r#"{{"model": "esm2-t33-650m", "workload": {{"mode": "inference", "batch": {batch}, "seq_len": {length}, "dtype": "{dtype}", "inference": {{"kind": "forward", "logits": "none"}}}}, "runtime": {{"process_ran_backward": false}}}}"#
        ))
        .unwrap()
    };
    let earlier = spec("fp32", 8, 512);
    for (batch, length) in [(8, 1024), (1, 1024), (8, 512)] {
        let stage = format!("inference fp16 b{batch} L{length}");
        let m = measured
            .iter()
            .find(|m| m["process"] == "after" && m["stage"] == stage.as_str())
            .unwrap_or_else(|| panic!("{stage} measured"));
        let later = spec("fp16", batch, length);
        let e = headroom_core::estimate::estimate_after(
            &later.model.arch,
            &earlier.workload,
            &later.workload,
            &later.runtime,
        )
        .unwrap();
        let reserved = m["reserved_peak"].as_u64().unwrap();
        let off = e.reserved_peak.0 as f64 / reserved as f64 - 1.0;
        assert!(
            off.abs() <= 0.01,
            "{stage}: reserved {} predicted, {reserved} measured ({:+.2}%)",
            e.reserved_peak.0,
            100.0 * off
        );
    }
}

/// `channels_last` (`model.to(memory_format=torch.channels_last)` and NHWC
/// images): cuDNN's kernels read the tensors as they are, so the layout
/// copies that make most of NCHW's workspaces are gone (the stem's padded
/// input and the NCHW-only 1x1/2 kernel excepted), the weights of k x k
/// kernels are copied once at load and the batch once. Pinned to the H200
/// (`measurements/channels-last/`): every job within 1% (predicted as NCHW
/// before the knob existed: -2.1% to +14.5%; the fp32 ones -3.2% and
/// -10.2% until the stem's weight-gradient block was modelled), with the
/// timm job of the real-job suite and the second batch's five
/// `channels_last` jobs (ResNet-18/34/50/101/152, predicted before they
/// were measured: -0.1% to +0.5%). The second batch's three NCHW twins
/// (-5.3% to +2.0%) are held by the convolutional guard's bounds.
#[test]
fn channels_last_jobs_drop_the_layout_copies() {
    let read = |name: &str| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../measurements/channels-last")
            .join(name);
        let text = std::fs::read_to_string(path).expect(name);
        let (rows, skipped) = compare_file(&text);
        assert!(skipped.is_empty(), "{name}: skipped {skipped:?}");
        rows
    };
    let mut rows = read("measured.jsonl");
    assert_eq!(rows.len(), 7);
    let (layout_last, nchw): (Vec<Compared>, Vec<Compared>) = read("measured-2.jsonl")
        .into_iter()
        .partition(|r| r.case.starts_with("g2_cl_"));
    assert_eq!((layout_last.len(), nchw.len()), (5, 3));
    check_bounds(
        "second batch, NCHW",
        &nchw.iter().collect::<Vec<_>>(),
        3.5,
        6.0,
        1,
    );
    rows.extend(layout_last);
    rows.push(measured_case(
        "real-jobs/measured.jsonl",
        "timm_resnet50_cl_b128_r224",
    ));
    report(&rows.iter().collect::<Vec<_>>());
    for r in &rows {
        let err = r.error() * 100.0;
        assert!(err.abs() <= 1.0, "{}: {err:+.1}% (limit 1%)", r.case);
        // The tensors themselves were right before and stay right.
        let allocated_off = r.allocated.0 as f64 / r.allocated.1 as f64 - 1.0;
        assert!(
            allocated_off.abs() <= 0.01,
            "{}: allocated {:+.2}%",
            r.case,
            100.0 * allocated_off
        );
    }
}

/// The allocations of a `channels_last` ResNet-18 training job, in the
/// order the H200 allocation trace shows them
/// (`measurements/channels-last/trace-segments.jsonl`, bf16 autocast, batch
/// 256): each k x k weight's copy at load, then its old block freed; the
/// NHWC copy of the batch, then the NCHW batch freed; the stem's
/// padded input copy (196 MiB at batch 256) and no other forward workspace
/// of a tensor's size, through the first forward. Sizes within 1 MiB (the
/// trace logs requests, the replay blocks).
#[test]
fn channels_last_allocations_follow_the_trace() {
    use headroom_core::{spec::Spec, trace::Replay};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/channels-last/trace-segments.jsonl");
    let text = std::fs::read_to_string(path).expect("trace-segments.jsonl");
    let case = "cl_resnet18_amp_sgd_b256_r224";
    let trace: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["case"] == case)
        .expect(case);
    const MIB: u64 = 1 << 20;
    // Large-pool allocations and frees from the first batch on (the job's
    // `batch()`), as the model logs them.
    let events: Vec<(bool, u64)> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .skip_while(|e| !e[3].as_str().unwrap().ends_with(":batch"))
        .filter(|e| matches!(e[0].as_str(), Some("A" | "F")) && e[1].as_u64().unwrap() > MIB)
        .map(|e| (e[0] == "A", e[1].as_u64().unwrap()))
        .collect();
    let spec = Spec::from_json(
        r#"{"model": "resnet-18", "workload": {"mode": "training", "batch": 256, "image_size": 224,
            "memory_format": "channels_last",
            "training": {"optimizer": "sgd", "momentum": 0.9, "precision": "amp_bf16", "steps": 3}},
            "runtime": {"process_ran_backward": false}}"#,
    )
    .unwrap();
    let mut r = Replay::new(spec.runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = MIB + 1;
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    let log = r.event_log.take().unwrap();
    // `model.to(memory_format=torch.channels_last)`: each k x k weight's
    // copy, then its old block freed (the trace: the job's line that
    // converts the model, between loading and the first batch).
    let relayout_real: Vec<(bool, u64)> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .skip_while(|e| !e[3].as_str().unwrap().ends_with("timm_train.py:32:main"))
        .take_while(|e| !e[3].as_str().unwrap().ends_with(":batch"))
        .filter(|e| matches!(e[0].as_str(), Some("A" | "F")) && e[1].as_u64().unwrap() > MIB)
        .map(|e| (e[0] == "A", e[1].as_u64().unwrap()))
        .collect();
    let relayout_ours: Vec<(bool, u64)> = log
        .iter()
        .filter(|(_, _, _, op)| op.name == "load weights: to channels_last")
        .map(|&(alloc, size, _, _)| (alloc, size))
        .collect();
    assert_eq!(
        relayout_ours.len(),
        16,
        "eight weights over 1 MiB, each copied then freed"
    );
    assert_eq!(relayout_real, relayout_ours);
    let ours: Vec<(bool, u64, &str)> = log
        .into_iter()
        .filter(|(_, _, _, op)| !op.name.starts_with("load weights"))
        .map(|(alloc, size, _, op)| (alloc, size, op.name))
        .collect();
    assert_eq!(ours[0].2, "input images");
    assert_eq!(ours[1].2, "input images: to channels_last");
    assert_eq!(
        ours[2],
        (false, ours[0].1, "input images: to channels_last")
    );
    let stem = ours
        .iter()
        .find(|e| e.2 == "convolution: cuDNN workspace")
        .expect("the stem's workspace");
    // The input padded to 8 channels, the filter likewise, cuDNN's 147 B,
    // in a block of 512 B units: 205,571,584 B (the trace asks 205,571,088).
    let padded: u64 = 256 * 8 * 224 * 224 * 2 + 64 * 8 * 7 * 7 * 2 + 147;
    assert_eq!(
        stem.1,
        padded.div_ceil(512) * 512,
        "the stem's padded input copy"
    );
    // Through the first forward (the trace's first 60 large events), every
    // event agrees in kind and size.
    for (i, (real, ours)) in events.iter().zip(&ours).take(60).enumerate() {
        assert_eq!(real.0, ours.0, "event {i}: allocation or free ({ours:?})");
        assert!(
            real.1.abs_diff(ours.1) <= MIB,
            "event {i}: {} B in the trace, {} B replayed ({})",
            real.1,
            ours.1,
            ours.2
        );
    }
}

/// The stem's weight-gradient kernel (3 input channels, so no data
/// gradient) takes one block: its input copied with the channels padded (8
/// in half precision, 4 in fp32), the output gradient copied (but in bf16
/// `channels_last`), the filter copies and 6,021,264 B of split-K partials
/// (`CUDNN_STEM_WGRAD_PARTIALS`). Pinned to the requests of the H200 traces
/// (`measurements/channels-last/trace-segments*.jsonl`,
/// `measurements/h200-generalization/trace-segments-14.jsonl`); the model
/// had taken the NCHW copies with 3 fp32 channels and 1.5 MiB of partials,
/// and nothing in `channels_last`, where fp32 ResNet-18 at 448 px was 1 GB
/// under in reserved memory.
#[test]
fn the_stems_weight_gradient_block_is_the_traces() {
    use headroom_core::families::cnn::{backward_workspace, ConvCall};
    let rt = headroom_core::RuntimeProfile::h200();
    let stem = |batch: u64, image: u64, dsize: u64, channels_last: bool| ConvCall {
        cin: 3,
        cout: 64,
        k: 7,
        groups: 1,
        in_hw: image,
        out_hw: image / 2,
        batch,
        dsize,
        fp16: false,
        channels_last,
    };
    for (call, traced) in [
        (stem(256, 224, 2, false), 622_734_480u64),
        (stem(256, 224, 2, true), 211_692_688),
        (stem(64, 448, 4, false), 1_033_675_920),
        (stem(64, 448, 4, true), 1_033_675_920),
        (stem(64, 224, 4, true), 262_972_560),
    ] {
        assert_eq!(
            backward_workspace(&rt, &call),
            [0, traced],
            "{call:?}: no data-gradient block, then the traced request"
        );
    }
}

/// The first convolution's blocks (3 image channels) over batch (16 to
/// 256), image (224, 288 px), dtype (fp16, bf16, fp32) and layout, as
/// `measurements/h200-cudnn/stem_sweep.py` measured them on the H200: the
/// model's forward and weight-gradient blocks of ResNet's 7x7 stem and
/// MobileNetV2's 3x3 stem are each within 2 MiB of the block cuDNN took
/// (which the allocator rounds, or serves from a cached block up to 1 MiB
/// larger), except 11 of the 120 rows, named below. Before: fp16 ResNet stems were
/// modelled with 8 padded channels (98 MiB over at b256), and MobileNetV2's
/// NCHW stem with copies it never takes (270 MiB at fp32 b128).
#[test]
fn the_stem_blocks_follow_the_sweep() {
    use headroom_core::families::cnn::{backward_workspace, forward_workspace, ConvCall};
    let rt = headroom_core::RuntimeProfile::h200();
    let text = measurement_text("h200-cudnn/stem_sweep.jsonl");
    // Rows whose choice the model does not follow, each over-estimated:
    // fp32 ResNet stems at batch 16 keep fewer split-K partials (2.9 MB,
    // not 6.0); fp16 MobileNetV2 in NCHW at 288 px pads its input to 4
    // channels or none (8 at 224 px); fp32 `channels_last` MobileNetV2 at
    // batch 16 takes no input copy (it does from batch 32).
    let known = |shape: &str, dtype: &str, cl: bool, image: u64, batch: u64| match shape {
        "resnet_stem" => dtype == "fp32" && batch == 16,
        _ => (dtype == "fp16" && !cl && image == 288) || (dtype == "fp32" && cl && batch == 16),
    };
    let (mut checked, mut known_seen) = (0, 0);
    for line in text.lines().skip(1) {
        let row: serde_json::Value = serde_json::from_str(line).expect("row");
        let shape = row["shape"].as_str().unwrap();
        if !shape.ends_with("_stem") {
            continue;
        }
        let dtype = row["dtype"].as_str().unwrap();
        let (k, image, batch) = (
            row["k"].as_u64().unwrap(),
            row["image"].as_u64().unwrap(),
            row["batch"].as_u64().unwrap(),
        );
        let cl = row["channels_last"].as_bool().unwrap();
        let call = ConvCall {
            cin: 3,
            cout: row["cout"].as_u64().unwrap(),
            k,
            groups: 1,
            in_hw: image,
            out_hw: image / 2,
            batch,
            dsize: if dtype == "fp32" { 4 } else { 2 },
            fp16: dtype == "fp16",
            channels_last: cl,
        };
        let modelled = [
            forward_workspace(&rt, &call),
            backward_workspace(&rt, &call)[1],
        ];
        let measured = [
            row["forward"].as_u64().unwrap(),
            row["weight"].as_u64().unwrap(),
        ];
        let within = modelled
            .iter()
            .zip(measured)
            .all(|(&m, r)| m.abs_diff(r) <= 2 << 20);
        if known(shape, dtype, cl, image, batch) {
            assert!(!within, "{line}: now followed; drop it from the known rows");
            known_seen += 1;
            continue;
        }
        assert!(
            within,
            "{shape} {dtype} cl={cl} {image}px b{batch}: modelled {modelled:?}, measured {measured:?}"
        );
        checked += 1;
    }
    assert_eq!((checked, known_seen), (109, 11));
}

/// fp32 patch embeddings of 256 images and more
/// (`measurements/h200-cudnn/stem_sweep_large_batches.jsonl`: ViT-S/16 and
/// ViT-B/16 at 224 and 288 px, 384 to 1,024 images, NCHW): the forward
/// block is the input and filter copied with 4 channels, within the
/// allocator's 2 MiB, for every row; the weight-gradient block adds the
/// output gradient, and at 384 channels 120 fp32 partials of the filter
/// (180 MiB), within 2 MiB. Before the rule, ViT-S/16's forward at 512
/// images was modelled with its output copy: 154 MB over.
#[test]
fn large_fp32_patch_embeddings_copy_their_input_and_filter() {
    use headroom_core::families::cnn::{backward_workspace, forward_workspace, ConvCall};
    let rt = headroom_core::RuntimeProfile::h200();
    let text = measurement_text("h200-cudnn/stem_sweep_large_batches.jsonl");
    let mut rows = 0;
    for line in text.lines().skip(1) {
        let row: serde_json::Value = serde_json::from_str(line).expect("row");
        if row["channels_last"].as_bool().unwrap() {
            continue;
        }
        let (cout, image, batch) = (
            row["cout"].as_u64().unwrap(),
            row["image"].as_u64().unwrap(),
            row["batch"].as_u64().unwrap(),
        );
        assert!(batch >= 256, "{line}");
        let call = ConvCall {
            cin: 3,
            cout,
            k: 16,
            groups: 1,
            in_hw: image,
            out_hw: image / 16,
            batch,
            dsize: 4,
            fp16: false,
            channels_last: false,
        };
        let forward = forward_workspace(&rt, &call);
        let measured = row["forward"].as_u64().unwrap();
        assert!(
            forward.abs_diff(measured) <= 2 << 20,
            "{cout} ch {image}px b{batch}: forward {forward}, measured {measured}"
        );
        let weight = backward_workspace(&rt, &call)[1];
        let measured = row["weight"].as_u64().unwrap();
        assert!(
            weight.abs_diff(measured) <= 2 << 20,
            "{cout} ch {image}px b{batch}: weight {weight}, measured {measured}"
        );
        rows += 1;
    }
    assert_eq!(rows, 16);
}

/// timm's inference loop in a fresh process
/// (`measurements/inference-batches/`, again in `measurements/small-pool/`):
/// ResNet-50 fp16 b256 allocated 1,568,294,400 B with one batch and
/// 1,602,899,456 with three (NCHW), and 1,464,749,056 and 1,499,354,112
/// (`channels_last`), reserving the same with one batch as with three. From
/// the second batch on, the replay holds the 32 MiB cuBLAS workspace and
/// the 1 MiB cuBLASLt workspace the first batch's `fc` created, and the
/// last batch's logits until the next batch's result replaces them; one
/// batch peaks before the workspaces exist. This job keeps only the logits'
/// `argmax` (2,048 B) into the next batch (`top = model(x).argmax(-1)`; the
/// all-sizes trace), so three batches allocate 509,952 B less than the
/// replay, which holds the output as `out = model(x)` does; in
/// `channels_last` those 512,000 B of the small pool leave no 1 MiB gap
/// for the cuBLASLt workspace, which takes a 2 MiB small segment the real
/// run did not need.
#[test]
fn inference_loops_hold_the_workspace_from_the_second_batch() {
    use headroom_core::arch::Dtype;
    use headroom_core::workload::MemoryFormat;
    let arch = headroom_core::presets::find("resnet-50").unwrap().arch;
    let mut runtime = headroom_core::RuntimeProfile::h200();
    runtime.process_ran_backward = false;
    let mut w = headroom_core::Workload {
        batch: 256,
        image_size: Some(224),
        dtype: Dtype::Fp16,
        ..Default::default()
    };
    for (format, traced_one, traced_three, traced_reserved) in [
        (
            MemoryFormat::Contiguous,
            1_568_294_400u64,
            1_602_899_456u64,
            2_090_860_544u64,
        ),
        (
            MemoryFormat::ChannelsLast,
            1_464_749_056,
            1_499_354_112,
            1_570_766_848,
        ),
    ] {
        w.memory_format = format;
        w.inference.batches = 1;
        let one = headroom_core::estimate(&arch, &w, &runtime).unwrap();
        w.inference.batches = 3;
        let three = headroom_core::estimate(&arch, &w, &runtime).unwrap();
        // The two workspaces, and the last batch's logits still referenced
        // where the job held only their argmax.
        const HELD_LOGITS_NOT_ARGMAX: u64 = 256 * 1000 * 2 - 256 * 8;
        let more = three.allocated_peak.0 - one.allocated_peak.0;
        assert_eq!(
            more,
            traced_three - traced_one + HELD_LOGITS_NOT_ARGMAX,
            "{format:?}"
        );
        for (modelled, traced) in [
            (one.allocated_peak.0, traced_one),
            (
                three.allocated_peak.0,
                traced_three + HELD_LOGITS_NOT_ARGMAX,
            ),
        ] {
            assert!(
                modelled.abs_diff(traced) < 1 << 20,
                "{format:?}: {modelled} vs {traced}"
            );
        }
        let small_segment = match format {
            MemoryFormat::ChannelsLast => 2 << 20,
            _ => 0,
        };
        assert_eq!(
            (one.reserved_peak.0, three.reserved_peak.0),
            (traced_reserved, traced_reserved + small_segment)
        );
        assert!(three.peak_op.starts_with("batch "), "{}", three.peak_op);
    }
}

/// The real-job suite's fourth set (`measurements/real-jobs-2/measured-4.jsonl`):
/// inference loops, each predicted before it was measured with
/// `inference.batches` as the job ran them: BERT sentence embeddings (4
/// batches, each `out` held into the next batch's forward), timm ViT-B/16
/// fp16 and ResNet-34 fp32 (4 batches), Qwen2.5-0.5B `generate` (2
/// prompts): -0.5% to +0.5%. Predicted as one batch, ResNet-34 would be
/// 20.7% under and BERT's allocated peak 52 MB under.
#[test]
fn inference_loops_meet_the_bounds() {
    let rows = measured_rows("real-jobs-2/measured-4.jsonl", 4);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("inference loops", &all, 0.5, 1.0, 0);
    let text = measurement_text("real-jobs-2/measured-4.jsonl");
    let resnet = text
        .lines()
        .find(|l| l.contains("\"timm_infer_resnet34_fp32_x4_b128_r224\""))
        .expect("ResNet-34 loop");
    let one_batch = resnet.replace("\"batches\":4", "\"batches\":1");
    assert_ne!(one_batch, resnet);
    let (rows, _) = compare_file(&one_batch);
    assert!(
        rows[0].error() < -0.15,
        "one batch: {:+.1}%",
        100.0 * rows[0].error()
    );
}

/// The calibration harness runs a model's cases in one process, emptying
/// the cache between them: ResNet-50 fp32 b32 at 512 px ran after b64 at
/// 224 px, whose `fc` created the cuBLAS workspace inside the segment of
/// its stem's output. That 196 MiB segment stays reserved with 164 MiB
/// free (the trace's final segment table,
/// `measurements/inference-batches/trace-segments.jsonl`), and the later
/// case's images land in it. Replayed after the earlier case, the later
/// one reserves within 2.1 MB of the 2,581,594,112 B measured (+0.3% at
/// the driver level); replayed alone, 107 MB less (-2.9%).
#[test]
fn a_case_after_another_keeps_the_earlier_workspaces_segment() {
    let text = measurement_text("h200/validation.jsonl");
    let pair: Vec<&str> = [
        "\"resnet50_inf_fp32_b64_r224_repro\"",
        "\"resnet50_inf_fp32_b32_r512\"",
    ]
    .iter()
    .map(|name| text.lines().find(|l| l.contains(name)).expect(name))
    .collect();
    let (after, _) = compare_file(&pair.join("\n"));
    let (alone, _) = compare_file(pair[1]);
    let (after, alone) = (&after[1], &alone[0]);
    assert_eq!(after.case, "resnet50_inf_fp32_b32_r512");
    assert!(
        after.reserved.0.abs_diff(after.reserved.1) < 3 << 20,
        "{:?}",
        after.reserved
    );
    assert!(
        after.error().abs() < 0.005,
        "{:+.2}%",
        100.0 * after.error()
    );
    assert!(
        alone.error() < -0.025,
        "alone: {:+.2}%",
        100.0 * alone.error()
    );
}

/// The real-job suite's second batch (`measurements/real-jobs-2/`): fp16
/// mixed precision with a `GradScaler` (HF `Trainer(fp16=True)`,
/// Lightning `16-mixed`, timm's loop) and gradient accumulation (the
/// `Trainer`'s `gradient_accumulation_steps`, Lightning's
/// `accumulate_grad_batches`, a timm loop), each predicted by the collector
/// that measured it before it ran: every job within 1% (measured -0.8% to
/// +0.5%) but timm's NCHW ResNet-50 with amp fp16, -4.7% since the stem's
/// block follows its trace (it had been right by a block the stem does not
/// take; the NCHW split-K blocks of later layers are left out, as in its
/// bf16 twin, `measurements/inference-batches/`).
#[test]
fn fp16_mixed_precision_and_accumulating_jobs_meet_the_bounds() {
    let rows = measured_rows("real-jobs-2/measured.jsonl", 9);
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("fp16 mixed precision and accumulation", &all, 0.5, 5.0, 0);
    for r in &rows {
        let bound = if r.case == "timm_resnet50_fp16_b128_r224" {
            0.05
        } else {
            0.01
        };
        assert!(
            r.error().abs() < bound,
            "{}: {:+.1}%",
            r.case,
            100.0 * r.error()
        );
    }
    // A second set, predicted before it was measured: Qwen2.5-0.5B and
    // GPT-2 under the `Trainer`, Lightning's `bf16-true`, timm's ViT-S/16
    // and ViT-L/16, ResNet-101 and ResNet-152: -0.2% to +2.0% (ResNet-152
    // in NCHW, over: cuDNN's per-shape workspaces; +4.1% before its fp16
    // stem followed the trace), none under by more than 0.5%.
    let second = measured_rows("real-jobs-2/measured-2.jsonl", 8);
    let all: Vec<&Compared> = second.iter().collect();
    check_bounds("the second set", &all, 0.5, 2.5, 0);
    for r in &second {
        assert!(r.error() > -0.005, "{}: {:+.1}%", r.case, 100.0 * r.error());
    }
    // A third set, inference in `channels_last` and NCHW (timm, three
    // batches each): -0.3% to +4.9% as predicted (the allocated peaks 34
    // to 38 MB under, the cuBLAS workspace the first batch's `fc` creates
    // live in the later ones; ResNet-50 fp16 103 MB over in reserved, its
    // stem's channels padded to 8 instead of 4); -0.3% to +0.5% with
    // `inference.batches: 3` and the stem as traced.
    let third = measured_rows("real-jobs-2/measured-3.jsonl", 4);
    let all: Vec<&Compared> = third.iter().collect();
    check_bounds("the third set", &all, 0.5, 1.0, 0);
    for r in &third {
        assert!(r.error() > -0.005, "{}: {:+.1}%", r.case, 100.0 * r.error());
    }
    // The accumulating Llama job's allocated peak: a whole set of fp32
    // gradients held through the later micro-batches, to 2 MB.
    let r = measured_case("real-jobs-2/measured.jsonl", "trainer_llama1b_ga4_b2_L1024");
    assert!(
        r.allocated.0.abs_diff(r.allocated.1) < 4 << 20,
        "allocated {} predicted, {} measured",
        r.allocated.0,
        r.allocated.1
    );
}

/// Gradient accumulation as `AccumulateGrad` does it, pinned to the H200
/// trace of the `Trainer`'s Llama-3.2-1B job with
/// `gradient_accumulation_steps=4` (its first optimizer step, four
/// micro-batches). The tied embedding's 1,050,673,152-byte gradient: in
/// the first micro-batch the head's contribution becomes `.grad` and the
/// lookup's is added into it in place (allocated, freed); in each later
/// one the head's contribution waits in the input buffer until the
/// lookup's has been added into it, then both are freed, the sum added
/// into the `.grad` held since the first (allocated, allocated, freed,
/// freed), never a second `.grad`.
#[test]
fn accumulated_gradients_follow_the_trace() {
    use headroom_core::{spec::Spec, trace::Replay};
    const TIED: u64 = 128_256 * 2_048 * 4;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/real-jobs-2/trace-step0.jsonl");
    let text = std::fs::read_to_string(path).expect("trace-step0.jsonl");
    let trace: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    // accelerate's `convert_outputs_to_fp32` copy of the logits (made and
    // dropped before backward; not part of the model) is left out.
    let mut converted = Vec::new();
    let mut real = String::new();
    for e in trace["events"].as_array().unwrap() {
        let (action, size, address) = (e[0].as_str().unwrap(), e[1].as_u64().unwrap(), &e[2]);
        if size != TIED || !matches!(action, "A" | "F") {
            continue;
        }
        if action == "A" && e[3].as_str().unwrap().contains("_convert_to_fp32") {
            converted.push(address.clone());
            continue;
        }
        if let Some(i) = converted.iter().position(|a| a == address) {
            converted.swap_remove(i);
            continue;
        }
        real.push_str(action);
    }
    let spec = Spec::from_json(
        r#"{"model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 1024,
            "attention": "sdpa", "training": {"optimizer": "adamw", "implementation": "fused",
            "precision": "amp_bf16", "steps": 1, "gradient_accumulation_steps": 4}},
            "runtime": {"process_ran_backward": false}}"#,
    )
    .unwrap();
    let mut r = Replay::new(spec.runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = TIED;
    // Every micro-batch replayed (the fourth repeats the third's state).
    let every_micro_batch = headroom_core::families::ReplayOptions {
        steady_state_shortcut: false,
        ..Default::default()
    };
    headroom_core::families::replay_with(
        &spec.model.arch,
        &spec.workload,
        &spec.runtime,
        &mut r,
        every_micro_batch,
    )
    .unwrap();
    let ours: String = r
        .event_log
        .take()
        .unwrap()
        .into_iter()
        .take_while(|(_, _, _, op)| !op.name.starts_with("optimizer"))
        .filter(|&(_, size, _, op)| size == TIED && !op.name.starts_with("load weights"))
        .map(|(alloc, ..)| if alloc { "A" } else { "F" })
        .collect();
    // The load's weight, then per micro-batch the loss (logits in fp32,
    // log-softmax, their gradients: AAFAAFFF) and the embedding's gradient.
    let first = "AAFAAFFF".to_string() + "A" + "AF";
    let later = "AAFAAFFF".to_string() + "AAFF";
    assert_eq!(real[1..], format!("{first}{later}{later}{later}"));
    assert_eq!(ours, real[1..]);
}

/// fp16 autocast makes the same tensors as bf16 autocast; the `GradScaler`
/// adds only scalars. The `Trainer`'s Llama-3.2-1B job measured with
/// `fp16=True` and with `bf16=True` (same batch, length and optimizer)
/// peaked 1,536 B apart in allocated memory (three 512-byte blocks live at
/// the peak: the scale, the growth tracker and the scaled loss) and at the
/// same reserved bytes; the replay's two peaks differ by the same 1,536 B.
#[test]
fn the_grad_scaler_adds_three_scalars_at_the_peak() {
    let bf16 = measured_case("real-jobs/measured.jsonl", "trainer_llama1b_b4_L1024");
    let fp16 = measured_case(
        "real-jobs-2/measured.jsonl",
        "trainer_llama1b_fp16_b4_L1024",
    );
    let scalars = 3 * 512;
    assert_eq!(fp16.allocated.1 - bf16.allocated.1, scalars, "measured");
    assert_eq!(fp16.allocated.0 - bf16.allocated.0, scalars, "predicted");
    assert_eq!(fp16.reserved.1, bf16.reserved.1, "measured");
    assert_eq!(fp16.reserved.0, bf16.reserved.0, "predicted");
}

/// Autocast casts `F.linear`'s bias before its weight and its input, and
/// caches the bias copy as it does the weight's: BERT amp training's first
/// query projection takes 1,536 B, 1,179,648 B, then the input copy and the
/// output (the all-sizes trace, `measurements/small-pool/`). Before,
/// the model cast no bias.
#[test]
fn autocast_casts_the_bias_before_the_weight() {
    let text = measurement_text("small-pool/trace-all-sizes.jsonl");
    let trace: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["case"] == "bert_base_train_amp_bf16_adamw_b32_L128")
        .expect("the amp case");
    let real: Vec<u64> = trace["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e[0] == "A"
                && e[3]
                    .as_str()
                    .unwrap()
                    .ends_with("modeling_bert.py:175:forward")
        })
        .take(4)
        .map(|e| e[1].as_u64().unwrap())
        .collect();
    let ours: Vec<u64> = fresh_case_events(
        "small-pool/measured.jsonl",
        "bert_base_train_amp_bf16_adamw_b32_L128",
    )
    .into_iter()
    .filter(|&(alloc, _, _, op)| {
        alloc
            && op.layer == Some(0)
            && op.step.is_none_or(|s| s == 0)
            && (op.name.starts_with("autocast") || op.name == "attention: query")
    })
    .take(4)
    .map(|(_, size, _, _)| size)
    .collect();
    assert_eq!(real, [1_536, 1_179_648, 6_291_456, 6_291_456]);
    // The replay logs blocks: a large-pool block keeps a remainder of up to
    // 1 MiB unsplit (the weight copy's 2 MiB block).
    assert_eq!(ours.len(), real.len());
    for (block, request) in ours.iter().zip(&real) {
        assert!(
            (*request..request + (1 << 20)).contains(block),
            "{ours:?} vs {real:?}"
        );
    }
}

/// A fresh process's first `addmm` with a bias takes cuBLASLt's 1 MiB
/// workspace right after the 32 MiB cuBLAS workspace and keeps it: BERT
/// fp32 inference b32 L128 (the all-sizes trace,
/// `measurements/small-pool/trace-all-sizes-2.jsonl`), whose allocated peak
/// the replay matches within 64 KiB with it (1,081,344 B under before).
#[test]
fn a_fresh_process_keeps_the_cublaslt_workspace() {
    const CASE: &str = "bert_base_inf_fp32_b32_L128";
    let text = measurement_text("small-pool/trace-all-sizes-2.jsonl");
    let trace: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|c| c["case"] == CASE)
        .expect(CASE);
    let events = trace["events"].as_array().unwrap();
    let workspace = events
        .iter()
        .position(|e| e[0] == "A" && e[1] == 32u64 << 20)
        .expect("the cuBLAS workspace");
    let lt = workspace
        + 1
        + events[workspace + 1..]
            .iter()
            .position(|e| e[0] == "A")
            .expect("an allocation after it");
    assert_eq!(events[lt][1], 1u64 << 20);
    assert!(
        !events[lt..]
            .iter()
            .any(|e| e[0] == "F" && e[2] == events[lt][2]),
        "never freed"
    );
    let ours: Vec<u64> = fresh_case_events("small-pool/measured-inference.jsonl", CASE)
        .into_iter()
        .filter(|&(alloc, _, _, _)| alloc)
        .map(|(_, size, _, _)| size)
        .collect();
    let ours_workspace = ours.iter().position(|&size| size == 32 << 20).unwrap();
    assert_eq!(ours[ours_workspace + 1], 1 << 20);
    let r = measured_case("small-pool/measured-inference.jsonl", CASE);
    assert!(
        r.allocated.0.abs_diff(r.allocated.1) < 65_536,
        "{} predicted, {} measured",
        r.allocated.0,
        r.allocated.1
    );
}

/// Every allocation and free of the replay of `case` (a measured case of a
/// fresh process in `file` under `measurements/`), small pool included.
fn fresh_case_events(file: &str, case: &str) -> Vec<(bool, u64, u64, headroom_core::trace::Op)> {
    let text = measurement_text(file);
    let line = text
        .lines()
        .find(|l| l.contains(&format!("\"{case}\"")))
        .unwrap_or_else(|| panic!("{case} in {file}"));
    let spec = headroom_core::spec::Spec::from_json(line).unwrap();
    assert!(
        !spec.runtime.process_ran_backward,
        "{case}: a fresh process"
    );
    let mut r = headroom_core::trace::Replay::new(spec.runtime.allocator, None);
    r.event_log = Some(Vec::new());
    headroom_core::families::replay(&spec.model.arch, &spec.workload, &spec.runtime, &mut r)
        .unwrap();
    r.event_log.take().unwrap()
}

/// `chunk_layer` frees a chunk's attention output only when the next
/// chunk's output replaces it (`output_chunk = layer(**chunks)`), so every
/// chunk runs with the previous chunk's output live. The H200 measured it:
/// ESMFold (fp16 stem) at 1,024 residues peaks higher in allocated bytes as
/// the chunk grows from 64 to 512, by exactly one more `[chunk, L, 128]`
/// fp32 output each time, and so at 2,048 residues from chunk 64 to 128.
/// Pinned to those measurements: the replay's allocated peak moves between
/// chunk sizes by the measured amount, to 1 MiB.
#[test]
fn a_chunked_fold_keeps_the_previous_chunks_output() {
    let at_1024: Vec<Compared> = [
        ("measured-11.jsonl", "esmfold_esm_fp16_chunk32_L1024"),
        ("measured-11.jsonl", "esmfold_esm_fp16_chunk64_L1024"),
        ("measured-11.jsonl", "esmfold_esm_fp16_chunk128_L1024"),
        ("measured-11.jsonl", "esmfold_esm_fp16_chunk256_L1024"),
        ("measured-12.jsonl", "esmfold_esm_fp16_chunk512_L1024"),
    ]
    .iter()
    .map(|(file, case)| measured_case(&format!("h200-generalization/{file}"), case))
    .collect();
    let at_2048: Vec<Compared> = [
        "esmfold_esm_fp16_chunk64_L2048_rec0",
        "esmfold_esm_fp16_chunk128_L2048_rec0",
    ]
    .iter()
    .map(|case| measured_case("h200-generalization/measured-17.jsonl", case))
    .collect();
    for cases in [&at_1024, &at_2048] {
        let first = &cases[0];
        for c in &cases[1..] {
            let measured_step = c.allocated.1 as i64 - first.allocated.1 as i64;
            let predicted_step = c.allocated.0 as i64 - first.allocated.0 as i64;
            assert!(
                (measured_step - predicted_step).abs() <= 1 << 20,
                "{} against {}: allocated peak {predicted_step:+} B predicted, {measured_step:+} B measured",
                c.case,
                first.case
            );
        }
    }
    // At 1,024 residues chunk 512's peak is 406 MB above chunk 32's: the
    // previous chunk's 256 MiB output is part of it.
    let step = at_1024[4].allocated.1 - at_1024[0].allocated.1;
    assert!(step > 256 << 20, "{step}");
}

/// What a fold keeps through its trunk, as the H200 trace of a chunked fold
/// shows it at the peak (`measurements/h200-generalization/
/// trace-snapshots-17.md`, chunk 128 at 1,024 residues, one pass): the
/// combined language-model states in `forward`'s `esm_s`
/// (`modeling_esmfold.py:2112`, 10 MiB), the recycling bins in
/// `recycle_bins` until the pass replaces them (`:1897`, 8 MiB of int64)
/// and the previous chunk's attention output (`_wrap_up`, 64 MiB). The
/// replay's peak is the trace's op and holds all three; its allocated peak
/// is within 64 MiB of the trace's (the sequence states of the blocks are
/// not replayed; the stem's fp32 construction, which the harness's build
/// leaves behind, is: 15 MiB over).
#[test]
fn a_fold_keeps_the_combined_states_and_the_recycling_bins() {
    use headroom_core::spec::Spec;
    let measured = measured_case(
        "h200-generalization/trace-measured-17.jsonl",
        "esmfold_esm_fp16_chunk128_L1024_rec0",
    );
    let spec = Spec::from_json(
        r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "batch": 1, "seq_len": 1024,
            "dtype": "fp32", "esmfold": {"stem_dtype": "fp16", "chunk_size": 128, "num_recycles": 0}}}"#,
    )
    .unwrap();
    let arch = &spec.model.arch;
    let live = headroom_core::estimate::live_at_peak(arch, &spec.workload, &spec.runtime).unwrap();
    const MIB: u64 = 1 << 20;
    for (op, bytes) in [
        ("stem: softmax(esm_s_combine) @ esm_s", 10 * MIB),
        ("trunk: recycle_bins (int64)", 8 * MIB),
        ("layer 0: triangle attention: linear_o", 64 * MIB),
        ("layer 0: triangle attention: softmax", 2048 * MIB),
    ] {
        let group = live.iter().find(|g| g.op.ends_with(op));
        assert_eq!(
            group.map(|g| g.bytes.0),
            Some(bytes),
            "{op} at the peak: {live:#?}"
        );
    }
    let (predicted, measured) = measured.allocated;
    assert!(
        predicted.abs_diff(measured) < 64 * MIB,
        "allocated peak {predicted} B predicted, {measured} B measured"
    );
}

/// Phi-3, Gemma 2 and Qwen1.5-MoE, measured for the first time
/// (`measurements/h200-generalization/measured-18.jsonl`, predicted before
/// measuring at 1023895 through the Llama code path: Phi-3 generation
/// b8 L1024 +10.4%, Gemma 2 bf16 SGD training -7.0%, Phi-3 amp training
/// -3.0%). What their modeling files and the batch's trace
/// (`trace-snapshots-18.md`) show, each pinned to the allocated peak it
/// decides:
/// - Phi-3's fused `qkv_proj` output stays in the attention's `qkv` local
///   until it returns, and `gate_up_proj`'s in the MLP's `gate` local;
///   the rotary `torch.cat` leaves the queries in (b, heads, s, hd), so
///   the flash output needs a `contiguous()` copy (amp training: 24 MiB a
///   layer, kept by `o_proj`);
/// - Gemma 2's four norms per layer (the attention's and the MLP's outputs
///   normalised before each residual sum), each computing and keeping its
///   two products in fp32, and its scaled embedding;
/// - a sliding-window layer takes a mask (and repeats grouped keys) only
///   once its keys reach the window.
#[test]
fn phi3_and_gemma2_layers_follow_their_modeling_files() {
    const MIB: i64 = 1 << 20;
    let file = "h200-generalization/measured-18.jsonl";
    for case in [
        "phi3mini_gen_bf16_b8_L1024",
        "phi3mini_gen_bf16_b4_L4000",
        "phi3mini_train_amp_bf16_adamw_b4_L1024",
        "phi3mini_train_amp_bf16_adamw_gradckpt_b8_L2048",
        "gemma2_9b_gen_bf16_b4_L2048",
        "gemma2_9b_gen_bf16_b1_L8000",
        "gemma2_9b_fwd_bf16_b2_L2048_last",
        "gemma2_9b_lora_r16_qv_bf16_adamw_gradckpt_b4_L2048",
        "gemma2_9b_train_bf16_sgd_b2_L1024",
    ] {
        let c = measured_case(file, case);
        let (predicted, measured) = c.allocated;
        let miss = predicted as i64 - measured as i64;
        assert!(
            miss.abs() <= 2 * MIB,
            "{case}: allocated peak {predicted} B predicted, {measured} B measured"
        );
        assert!(
            c.error().abs() < 0.02,
            "{case}: driver-level peak {:+.2}%",
            100.0 * c.error()
        );
    }
    // Batch 19, predicted with these mechanisms before it ran (de78152):
    // Phi-3-medium (grouped heads) past its window, generations whose
    // decode steps fill the window, Phi-3 LoRA on its fused modules, Gemma
    // 2's every-position logits and its LoRA under autocast.
    every_case_within("h200-generalization/measured-19.jsonl", 7, 64 * MIB, 0.02);
}

/// Qwen2-MoE's router casts its top-k weights back to the hidden states'
/// dtype (`router_top_value.to(router_logits.dtype)`), where Mixtral's
/// keeps them fp32: the experts' weighted outputs and their reordered copy
/// are bf16 in a bf16 model. The H200 trace of Qwen1.5-MoE generation
/// (`trace-snapshots-19.md`) holds four 128 MiB (S, hidden) bf16 blocks at
/// its peak, the last prefill layer's `grouped_mm_experts_forward`; with
/// fp32 weighted outputs the replay's inference peaks were 247 and 251 MiB
/// over. Pinned to both inference cases' allocated peaks.
#[test]
fn qwen2_moe_weights_its_experts_in_the_models_dtype() {
    const MIB: i64 = 1 << 20;
    for case in [
        "qwen15moe_gen_bf16_b8_L1024",
        "qwen15moe_fwd_bf16_b4_L2048_last",
    ] {
        let c = measured_case("h200-generalization/measured-18.jsonl", case);
        let (predicted, measured) = c.allocated;
        let miss = predicted as i64 - measured as i64;
        assert!(
            miss.abs() <= 16 * MIB,
            "{case}: allocated peak {predicted} B predicted, {measured} B measured"
        );
    }
}

/// What autograd keeps of a mixture-of-experts layer in training, as the
/// H200 trace of Qwen1.5-MoE LoRA training shows it at its peak
/// (`trace-snapshots-19.md`): the masked expert outputs, which
/// `proj_out * sample_weights_g` saves because the routing weights need a
/// gradient too (`moe.py:465`, 32 MiB a layer), and the shared expert's
/// output, which the sigmoid gate's product saves (8 MiB a layer); not the
/// layer's input, which `hidden_states[perm // top_k]` does not keep.
/// Without them the allocated peaks were 786 MiB (Qwen1.5-MoE) and 260 and
/// 1,039 MiB (Mixtral) under. Pinned to the non-checkpointed LoRA runs.
#[test]
fn moe_training_keeps_the_expert_outputs_autograd_saves() {
    const MIB: i64 = 1 << 20;
    for (file, case) in [
        (
            "measured-18.jsonl",
            "qwen15moe_lora_r16_qv_bf16_adamw_b2_L1024",
        ),
        (
            "measured-16.jsonl",
            "mixtral_lora_r16_qv_bf16_adamw_b1_L1024",
        ),
        (
            "measured-16.jsonl",
            "mixtral_lora_r16_qv_bf16_adamw_b2_L2048",
        ),
    ] {
        let c = measured_case(&format!("h200-generalization/{file}"), case);
        let (predicted, measured) = c.allocated;
        let miss = predicted as i64 - measured as i64;
        assert!(
            miss.abs() <= 32 * MIB,
            "{case}: allocated peak {predicted} B predicted, {measured} B measured"
        );
    }
    // Batch 20, predicted with this before it ran (65235eb): Qwen1.5-MoE
    // LoRA checkpointed and under autocast, its full bf16 SGD training and
    // a 32-token generation at batch 32, and a 64-token Gemma 2 generation.
    let (rows, _) = compare_file(&measurement_text("h200-generalization/measured-20.jsonl"));
    assert_eq!(rows.len(), 5);
    for c in &rows {
        let (predicted, measured) = c.allocated;
        let miss = predicted as i64 - measured as i64;
        assert!(
            miss.abs() <= 64 * MIB && c.error().abs() < 0.01,
            "{}: allocated peak {predicted} B predicted, {measured} B measured; driver-level {:+.2}%",
            c.case,
            100.0 * c.error()
        );
    }
}

/// Gemma 2 with eager attention (HF's advice for training it), batch 22,
/// predicted before it ran (114d82b): the attention caps its scores with
/// `tanh(scores / 50) * 50` before the mask, and training keeps each
/// layer's `tanh` output. Without the cap the amp LoRA run at b2 L2048
/// (no checkpointing) was 10.1% under (11.3 GB: 42 layers x 256 MiB) and
/// full bf16 SGD training 5.5% under; with it their allocated peaks are
/// within 64 MiB and every driver-level peak within 2%, but the amp LoRA
/// run's: +3.4% since peft's fp32 input cast lives until each LoRA layer
/// returns (batch 27b's trace), its allocated peak within 34 MB and its
/// reserved 3.8 GB over (a placement; -0.3% before); and the checkpointed
/// LoRA run at b1 L4608, predicted after the run that made its optimizer
/// (b4 L2048), -2.9% (allocated within 75 KB, reserved 1.4 GB under; +1.0% while `check` replayed
/// the build's first training case, from another process, before it;
/// -3.1% before Gemma 2's second eager mask, trace 30).
#[test]
fn gemma2_eager_attention_keeps_its_capped_scores() {
    every_case_within("h200-generalization/measured-22.jsonl", 7, 64 << 20, 0.035);
}

/// Batch 23, predicted at b4bd4ab before it ran: eager amp training of
/// Llama-3.2-1B (bf16 and fp16 autocast) and Phi-3-mini, whose products
/// autocast casts (62b3680), and GPT-2 forwards and generations, greedy
/// and beam search, whose blocks free their locals in transformers'
/// order (ec108d4): every allocated peak within 2 MiB (the eager amp
/// jobs within 1 KB), every driver-level peak within 2%.
#[test]
fn eager_autocast_and_gpt2_blocks_hold_on_new_shapes() {
    every_case_within("h200-generalization/measured-23.jsonl", 8, 2 << 20, 0.02);
}

/// Every case of `file` (`count` of them): allocated peak within
/// `allocated_bytes`, driver-level peak within `driver` (a fraction).
#[track_caller]
fn every_case_within(file: &str, count: usize, allocated_bytes: i64, driver: f64) {
    let (rows, _) = compare_file(&measurement_text(file));
    assert_eq!(rows.len(), count, "{file}");
    for c in &rows {
        let (predicted, measured) = c.allocated;
        let miss = predicted as i64 - measured as i64;
        assert!(
            miss.abs() <= allocated_bytes,
            "{}: allocated peak {predicted} B predicted, {measured} B measured",
            c.case
        );
        assert!(
            c.error().abs() < driver,
            "{}: driver-level peak {:+.2}%",
            c.case,
            100.0 * c.error()
        );
    }
}

/// A padded batch (an `attention_mask` with zeros), pinned to the H200
/// probe of Llama-3.2-1B (`measurements/padding/probe.jsonl`, each job in
/// a fresh process with no mask and with the first sequence's first 256
/// tokens padded): transformers' (b, 1, q, kv) mask for the call, keys and
/// values repeated per query head, SDPA's bias (saved for backward in
/// training). The padded training run's allocated peak is predicted
/// within 1 MiB; in every job the peak moves as measured, within 1 MiB
/// (the probe loads its inference models differently from the spec's
/// default, so their absolute peaks are not compared).
#[test]
fn a_padded_batch_repeats_keys_and_adds_a_bias_as_measured() {
    const MIB: i64 = 1 << 20;
    let probe: Vec<serde_json::Value> = measurement_text("padding/probe.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a probe line"))
        .collect();
    let measured = |job: &str, mask: &str| -> i64 {
        probe
            .iter()
            .find(|r| r["job"] == job && r["mask"] == mask)
            .and_then(|r| r["alloc_peak"].as_i64())
            .unwrap_or_else(|| panic!("{job} {mask} in the probe"))
    };
    let predicted = |workload: &str, padded: bool| -> i64 {
        let json = format!(
            r#"{{"model": "llama-3.2-1b", "workload": {{{workload}, "padded": {padded}}}}}"#
        );
        let spec = headroom_core::spec::Spec::from_json(&json).unwrap();
        headroom_core::estimate(&spec.model.arch, &spec.workload, &spec.runtime)
            .unwrap()
            .allocated_peak
            .0 as i64
    };
    let jobs = [
        (
            "train",
            r#""mode": "training", "batch": 8, "seq_len": 2048, "training": {"precision": "amp_bf16", "optimizer": "adamw", "steps": 2}"#,
        ),
        (
            "generate",
            r#""mode": "inference", "batch": 8, "seq_len": 2048, "dtype": "bf16", "inference": {"kind": "generate", "new_tokens": 16}"#,
        ),
        (
            "forward",
            r#""mode": "inference", "batch": 8, "seq_len": 4096, "dtype": "bf16", "inference": {"kind": "forward", "logits": "last"}"#,
        ),
    ];
    for (job, workload) in jobs {
        let moved = predicted(workload, true) - predicted(workload, false);
        let measured_move = measured(job, "padded") - measured(job, "none");
        assert!(
            (moved - measured_move).abs() <= MIB,
            "{job}: padding moves the allocated peak by {moved} B predicted, {measured_move} B measured"
        );
        assert!(measured_move > 16 * MIB, "{job}: padding costs memory");
    }
    let (train, _) = jobs[0];
    assert!(
        (predicted(jobs[0].1, true) - measured(train, "padded")).abs() <= MIB,
        "padded training's allocated peak"
    );
}

/// Six padded jobs through the harness, predicted before they ran
/// (029d87c): generations (each decode step repeats every layer's cache),
/// a forward, amp and fp32 training, LoRA with checkpointing (the mask
/// kept for the recompute). Every driver-level peak within 1%.
#[test]
fn padded_jobs_through_the_harness_are_within_one_percent() {
    every_driver_peak_within("padding/measured-padded.jsonl", 6, |_| 0.01);
}

/// Beam search through the harness (`generate(num_beams=...)`), predicted
/// at 2cfd3c9 before measuring: the 7- and 8-billion-parameter jobs
/// within 0.1%, GPT-2 within 0.5% since its block's locals follow the
/// trace (it was -4.6%), and the padded Llama-3.2-1B search under by
/// 2.8% in reserved memory (docs/accuracy.md).
#[test]
fn beam_search_jobs_through_the_harness() {
    every_driver_peak_within(
        "generation-search/measured-beams.jsonl",
        8,
        |case| match case {
            "llama1b_padded_beams4_gen_bf16_b4_L1024_n32" => 0.03,
            "gpt2_beams4_gen_fp16_b8_L512_n64" | "llama1b_beams8_gen_bf16_b4_L512_n128" => 0.005,
            _ => 0.001,
        },
    );
}

/// Padded batches with eager attention, predicted at 2aed79c (before the
/// autocast casts of eager products were modelled the amp training job
/// was -8.5%).
#[test]
fn padded_eager_jobs_through_the_harness_are_within_half_a_percent() {
    every_driver_peak_within("padding/measured-padded-eager.jsonl", 5, |_| 0.005);
}

/// Every case of `file` (`count` of them): driver-level peak within
/// `bound(case)` (a fraction).
#[track_caller]
fn every_driver_peak_within(file: &str, count: usize, bound: impl Fn(&str) -> f64) {
    let (rows, _) = compare_file(&measurement_text(file));
    assert_eq!(rows.len(), count, "{file}");
    for c in &rows {
        assert!(
            c.error().abs() < bound(&c.case),
            "{}: driver-level peak {:+.2}%",
            c.case,
            100.0 * c.error()
        );
    }
}

/// Encoders fine-tuned for classification through the harness (BERT-base
/// and BERT-large sequence and token classifiers, ESM-2 650M sequence,
/// one-label regression and token classifiers, with and without
/// checkpointing; batch 26), predicted at 332f547 before they were
/// measured: within 0.6% but ESM-2's training jobs, 0.5% under, then
/// traced (`erf`'s backward temporaries) and within 0.2% since.
#[test]
fn classification_heads_through_the_harness_are_within_half_a_percent() {
    every_driver_peak_within("h200-generalization/measured-26.jsonl", 9, |_| 0.005);
    every_driver_peak_within("h200-generalization/trace-measured-26.jsonl", 1, |_| 0.002);
    every_driver_peak_within("h200-generalization/trace-measured-26b.jsonl", 1, |_| 0.002);
}

/// The Trainer fine-tuning BERT-base and ESM-2 650M for classification
/// (bf16, fused AdamW; a sequence classifier, and a token classifier with
/// checkpointing), measured through `headroom run --cmd`.
#[test]
fn classification_jobs_through_the_trainer_are_within_half_a_percent() {
    every_driver_peak_within("real-jobs-2/measured-6.jsonl", 3, |_| 0.005);
}

/// Eager attention in training (batch 31: GPT-2 with a cache, Llama-3.2-1B
/// and Qwen3 checkpointed and with a cache, Mistral-7B and Gemma-2-9B
/// LoRA, Phi-3-mini, BERT), predicted at 2f4d492 before they ran, each in
/// a fresh process: allocated peaks within 17 MB, driver-level peaks
/// within 1% (`measurements/h200-generalization/README.md`, batch 31).
#[test]
fn eager_training_jobs_predicted_before_measuring_are_within_one_percent() {
    every_case_within("h200-generalization/measured-31.jsonl", 9, 20_000_000, 0.01);
}

/// Decoders as sequence classifiers (batch 27 and 27b, the `Trainer`'s
/// reward model of `real-jobs-2/measured-7.jsonl`), predicted at 45d46b6
/// and 7ed860e before they ran. Full training, a forward and GPT-2 are
/// within 1.6%; the checkpointed jobs are under in reserved memory (-3.5%
/// and -4.3%, allocated within 150 KB): trace 27b first differs from the
/// replay at event 1,460, as backward begins; the mechanism is not found.
/// Guarded, not met.
#[test]
fn decoder_classifiers_are_within_the_bounds_their_traces_explain() {
    every_driver_peak_within("h200-generalization/measured-27.jsonl", 3, |_| 0.016);
    every_driver_peak_within("h200-generalization/measured-27b.jsonl", 1, |_| 0.036);
    every_driver_peak_within("real-jobs-2/measured-7.jsonl", 1, |_| 0.044);
}

/// Batch 33 (ESM-2 3B, 150M and 35M, ViT-L/16, ResNet-34 and -152,
/// BERT-large, Qwen3-4B LoRA, Phi-3-mini past its window, Mistral-Nemo
/// generation), predicted at 6b1d322 before they ran, each in a fresh
/// process (`measurements/h200-generalization/README.md`, batch 33), and
/// the real jobs' eighth set (timm, the `Trainer`, Lightning, `generate()`
/// and sentence embeddings at other sizes, `real-jobs-2/measured-8.jsonl`),
/// and batch 34's jobs after jobs in one process each.
#[test]
fn other_sizes_predicted_before_measuring_are_within_bounds() {
    // Batch 34: fifteen jobs in seven process histories, predicted at
    // c517342 after what ran before them: within 0.4%.
    every_driver_peak_within("h200-generalization/measured-34.jsonl", 15, |_| 0.005);
    every_driver_peak_within("h200-generalization/measured-33.jsonl", 13, |_| 0.006);
    every_driver_peak_within("real-jobs-2/measured-8.jsonl", 8, |_| 0.006);
}

/// Jobs run after others of their build in one harness process, traced
/// again in the same order (`measurements/history-traces/`: a Llama-3.2-1B
/// forward after another, Phi-3-mini's forward after two generations,
/// Gemma-2-9B LoRA training after a larger one, Llama-3.2-1B beam search
/// after another; each peak as first measured, to the byte). Replayed
/// after what ran before them, within 0.3% but Phi-3-mini's second
/// generation (-0.8%, as before the change): before the segments
/// created after `empty_cache()` went below the earlier ones
/// (`allocator::VA_GRANULE`), the later jobs were 2.2% to 2.9% under.
#[test]
fn jobs_after_others_in_one_process_are_within_bounds() {
    for (file, cases) in [
        ("history-traces/measured-llama1b-forwards.jsonl", 2),
        ("history-traces/measured-phi3-inference.jsonl", 3),
        ("history-traces/measured-gemma9b-lora.jsonl", 2),
        ("history-traces/measured-llama1b-beams.jsonl", 2),
    ] {
        every_driver_peak_within(file, cases, |case| {
            if case == "phi3mini_gen_bf16_b4_L4000" {
                0.009
            } else {
                0.003
            }
        });
    }
}

/// timm's ViTs in fp32 beyond the patch-embedding table
/// (`real-jobs-2/measured-12.jsonl`: ViT-S/16 and ViT-B/16 training at
/// b320 and b288, inference at b768 and b1024), predicted at f2b72fd
/// before they ran, with the large-batch rule
/// (`cnn::CUDNN_FP32_PATCHIFY_LARGE_BATCH`): within 0.5%.
#[test]
fn large_fp32_patch_embeddings_hold_in_real_jobs() {
    every_driver_peak_within("real-jobs-2/measured-12.jsonl", 4, |_| 0.005);
}

/// `generate()` returning every step's scores or logits
/// (`real-jobs-2/measured-9.jsonl`, no logits processor; `measured-10.jsonl`,
/// the minimum-length processors running, predicted before they ran), and
/// timm's ViTs at other sizes (`measured-11.jsonl`, predicted before they
/// ran; the fp32 inference at b512 was 1.5% over until its patch
/// embedding's forward took `cnn::CUDNN_FP32_PATCHIFY_LARGE_BATCH`'s rule).
#[test]
fn returned_scores_and_timm_vits_are_within_bounds() {
    every_driver_peak_within("real-jobs-2/measured-9.jsonl", 3, |_| 0.017);
    every_driver_peak_within("real-jobs-2/measured-10.jsonl", 2, |_| 0.007);
    every_driver_peak_within("real-jobs-2/measured-11.jsonl", 3, |_| 0.004);
}

/// ESMFold as the harness builds it (`spec::estimate_as_measured`):
/// `EsmForProteinFolding.__init__` builds the ESM-2 stem in fp32 and casts
/// it to fp16, and the harness empties the cache before the case, so the
/// segments the cast shared with kept weights stay with their holes. The
/// H200 trace of the process's first case (`measurements/shared-process/
/// trace-public-order.jsonl.gz`) starts with 71 MiB allocated beyond the
/// weights and puts the first matmul's cuBLAS workspace 32 MiB into a 100
/// MiB segment; replayed so, the case's allocated peak is right to 1 MiB
/// and its reserved peak to 4 MiB (as a compact load: 71 MiB and 110 MiB
/// under). The next models of that process inherit the segment: BERT's
/// reserved peak 2 MiB under, ResNet-50's at batch 256 to the byte.
#[test]
fn esmfold_replays_as_the_harness_built_it() {
    const MIB: u64 = 1 << 20;
    let file = "shared-process/measured-public-order.jsonl";
    for (case, allocated_within, reserved_within) in [
        ("po_esmfold_esm_fp16_chunkNone_L64", MIB, 4 * MIB),
        ("po_bert_base_inf_fp32_b32_L128", MIB, 2 * MIB),
        ("po_resnet50_inf_fp32_b256_r224", MIB, 0),
    ] {
        let c = measured_case(file, case);
        let (pa, ma) = c.allocated;
        let (pr, mr) = c.reserved;
        assert!(
            pa.abs_diff(ma) <= allocated_within,
            "{case}: allocated {pa} predicted, {ma} measured"
        );
        assert!(
            pr.abs_diff(mr) <= reserved_within,
            "{case}: reserved {pr} predicted, {mr} measured"
        );
    }
}

/// The public cases replayed in their processes' order
/// (`measurements/public/h200-public-history.jsonl`, written by
/// `add_process_history.py`): BERT and ESM-2 ran after the file's Llama
/// builds in one process, and replayed after them BERT b32 L128 is exact
/// (the cuBLAS workspaces those builds left, not a fresh process's). Every
/// case within 6%; the file is the received one plus only those counts.
#[test]
fn public_cases_in_their_processes_order_are_within_6_percent() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../measurements/public");
    let with_history = std::fs::read_to_string(root.join("h200-public-history.jsonl")).unwrap();
    let received = public_measurements();
    let mut annotated = 0;
    for (a, b) in received.lines().zip(with_history.lines()) {
        let a: serde_json::Value = serde_json::from_str(a).unwrap();
        let mut b: serde_json::Value = serde_json::from_str(b).unwrap();
        if let Some(runtime) = b.get_mut("runtime").and_then(|r| r.as_object_mut()) {
            annotated += usize::from(runtime.remove("process_builds_before").is_some());
        }
        assert_eq!(a, b);
    }
    assert_eq!(received.lines().count(), with_history.lines().count());
    assert_eq!(annotated, 5, "the BERT and ESM-2 cases");
    let (rows, skipped) = compare_file(&with_history);
    assert!(skipped.is_empty(), "{skipped:?}");
    let all: Vec<&Compared> = rows.iter().collect();
    check_bounds("public, in process order", &all, 1.0, 6.0, 0);
    let bert = rows
        .iter()
        .find(|r| r.case == "bert_base_inf_fp32_b32_L128")
        .unwrap();
    assert!(bert.error().abs() < 0.005, "{:+.2}%", 100.0 * bert.error());
}
