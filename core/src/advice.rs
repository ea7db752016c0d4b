//! What would make a job fit a card: the smallest changes, each an exact
//! estimate on that card, ranked by how little they change the job.
//!
//! Every candidate is the job with one thing changed (the allocator's
//! setting, the optimizer's implementation, the attention kernel, a
//! convolutional network's memory format, ESMFold's chunking, gradient
//! checkpointing, the KV cache's precision, pure bf16 training, LoRA, a
//! smaller batch or length, more GPUs). It is
//! kept when its estimate fits the card the way the GPU table decides
//! ([`crate::search::decision_capacity`]: the likely range's high end plus
//! the margin within the usable memory). The order is the order of
//! [`Change`]: first what leaves the model's math alone, last what trains
//! or serves a different job. When no single change makes a training job
//! fit, combinations are tried (the free changes with checkpointing, then
//! with micro-batches, LoRA or FSDP2), each ranked by its
//! costliest change.

use crate::arch::{Architecture, Dtype};
use crate::error::Error;
use crate::estimate::{estimate_with, EstimateOptions};
use crate::gpus::Gpu;
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::search::{
    decision_capacity, esmfold_chunk_that_fits, max_batch, max_length, ChunkChoice,
};
use crate::workload::{
    Attention, InferenceKind, Lora, MemoryFormat, Mode, Optimizer, OptimizerImpl, Precision,
    Workload,
};
use alloc::string::String;
use alloc::vec::Vec;

/// One kind of change, in the order suggestions are ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    /// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
    ExpandableSegments,
    /// The fused optimizer kernel.
    FusedOptimizer,
    /// SDPA instead of eager attention.
    SdpaAttention,
    /// A convolutional network in `channels_last` instead of NCHW.
    ChannelsLast,
    /// ESMFold's trunk in chunks.
    EsmfoldChunks,
    /// Gradient checkpointing.
    GradientCheckpointing,
    /// The same samples per optimizer step in smaller micro-batches.
    GradientAccumulation,
    /// An 8-bit KV cache.
    SmallerKvCache,
    /// Fewer beams in a beam search (1 is greedy decoding).
    FewerBeams,
    /// bf16 parameters instead of fp32 master weights.
    PureBf16,
    /// LoRA adapters instead of full fine-tuning.
    Lora,
    /// QLoRA: LoRA adapters over a 4-bit base (bitsandbytes NF4 with double
    /// quantization), gradient checkpointing and paged 8-bit AdamW, as
    /// peft's `prepare_model_for_kbit_training` recipe runs it.
    Qlora,
    /// A smaller batch.
    SmallerBatch,
    /// A shorter sequence or a smaller image.
    ShorterLength,
    /// The job spread over several cards.
    MoreGpus,
}

impl Change {
    /// What the change costs the user.
    pub fn cost(self) -> &'static str {
        match self {
            Change::ExpandableSegments => "none: an allocator setting, same math",
            Change::FusedOptimizer => "none: the same update in one kernel",
            Change::SdpaAttention => "none for the result: the same attention, another kernel",
            Change::ChannelsLast => {
                "none for the result: the same convolutions on NHWC tensors, no layout copies"
            }
            Change::EsmfoldChunks => "slower folding: the trunk runs in chunks",
            Change::GradientCheckpointing => {
                "about a third more compute: each layer is run again in backward"
            }
            Change::GradientAccumulation => {
                "slower steps: the same samples per step, in smaller micro-batches"
            }
            Change::SmallerKvCache => "some quality: keys and values stored in 8 bits",
            Change::FewerBeams => "a narrower search: fewer candidate sequences kept each step",
            Change::PureBf16 => "some precision: no fp32 master weights",
            Change::Lora => "a different training: only low-rank adapters learn",
            Change::Qlora => {
                "a different training: low-rank adapters over a 4-bit base, slower steps (each layer dequantized in forward and backward)"
            }
            Change::SmallerBatch => {
                "fewer samples per step (accumulate gradients to keep the batch)"
            }
            Change::ShorterLength => "shorter inputs",
            Change::MoreGpus => "more cards, and their interconnect",
        }
    }
}

/// One suggestion: the change, the job with it, and its estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Suggestion {
    /// The kind of change.
    pub change: Change,
    /// The change in words, naming the spec field and its new value.
    pub what: String,
    /// The job with the change.
    pub workload: Workload,
    /// The runtime with the change (the allocator setting).
    pub runtime: RuntimeProfile,
    /// Driver-level peak of the changed job, per rank (on the card).
    pub driver_peak: u64,
}

/// The suggestions that make `workload` fit `gpu` (with `margin_percent`
/// on top of the likely range's high end), best first; empty when the job
/// already fits. Candidates the model refuses are left out.
pub fn advise(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    gpu: &Gpu,
    margin_percent: u32,
) -> Result<Vec<Suggestion>, Error> {
    let capacity =
        |w: &Workload, rt: &RuntimeProfile| decision_capacity(gpu, arch, w, rt, margin_percent);
    let estimate_on = |w: &Workload, rt: &RuntimeProfile| {
        estimate_with(
            arch,
            w,
            rt,
            EstimateOptions {
                capacity: Some(capacity(w, rt)),
                ..EstimateOptions::default()
            },
        )
    };
    let here = estimate_on(workload, runtime)?;
    if here.fits {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut consider = |change: Change, what: String, w: Workload, rt: RuntimeProfile| {
        if let Ok(e) = estimate_on(&w, &rt) {
            if e.fits {
                out.push(Suggestion {
                    change,
                    what,
                    workload: w,
                    runtime: rt,
                    driver_peak: e.driver_peak.0,
                });
            }
        }
    };
    let training = workload.mode == Mode::Training;
    let vision = arch.is_vision();
    let decoder = matches!(arch, Architecture::Decoder(_));

    if !runtime.allocator.expandable_segments {
        let mut rt = runtime.clone();
        rt.allocator.expandable_segments = true;
        consider(
            Change::ExpandableSegments,
            "runtime.allocator: \"expandable_segments\"".into(),
            workload.clone(),
            rt,
        );
    }
    if training
        && workload.training.implementation != OptimizerImpl::Fused
        && matches!(
            workload.training.optimizer,
            Optimizer::Adamw | Optimizer::SgdMomentum | Optimizer::Sgd
        )
    {
        let mut w = workload.clone();
        w.training.implementation = OptimizerImpl::Fused;
        consider(
            Change::FusedOptimizer,
            "workload.training.implementation: \"fused\"".into(),
            w,
            runtime.clone(),
        );
    }
    if workload.attention == Attention::Eager && !vision {
        let mut w = workload.clone();
        w.attention = Attention::Sdpa;
        consider(
            Change::SdpaAttention,
            "workload.attention: \"sdpa\"".into(),
            w,
            runtime.clone(),
        );
    }
    if matches!(arch, Architecture::Cnn(_)) && workload.memory_format == MemoryFormat::Contiguous {
        let mut w = workload.clone();
        w.memory_format = MemoryFormat::ChannelsLast;
        consider(
            Change::ChannelsLast,
            "workload.memory_format: \"channels_last\"".into(),
            w,
            runtime.clone(),
        );
    }
    if matches!(arch, Architecture::EsmFold(_)) {
        let cap = capacity(workload, runtime);
        if let ChunkChoice::Chunk(c) = esmfold_chunk_that_fits(arch, workload, runtime, cap)? {
            let mut w = workload.clone();
            w.esmfold.chunk_size = Some(c);
            consider(
                Change::EsmfoldChunks,
                alloc::format!("workload.esmfold.chunk_size: {c}"),
                w,
                runtime.clone(),
            );
        }
    }
    if training && !workload.training.grad_checkpointing {
        let mut w = workload.clone();
        w.training.grad_checkpointing = true;
        consider(
            Change::GradientCheckpointing,
            "workload.training.grad_checkpointing: true".into(),
            w,
            runtime.clone(),
        );
    }
    if decoder
        && !training
        && workload.inference.kind == InferenceKind::Generate
        && workload
            .inference
            .kv_dtype
            .unwrap_or(workload.dtype)
            .bytes()
            > 1
    {
        let mut w = workload.clone();
        w.inference.kv_dtype = Some(Dtype::Int8);
        consider(
            Change::SmallerKvCache,
            "workload.inference.kv_dtype: \"int8\"".into(),
            w,
            runtime.clone(),
        );
    }
    if decoder && workload.beams() > 1 {
        // The most beams that fit, halving down to greedy decoding: each
        // halving runs half the rows.
        let mut beams = workload.inference.num_beams / 2;
        while beams >= 1 {
            let mut w = workload.clone();
            w.inference.num_beams = beams;
            if estimate_on(&w, runtime).is_ok_and(|e| e.fits) || beams == 1 {
                consider(
                    Change::FewerBeams,
                    alloc::format!("workload.inference.num_beams: {beams}"),
                    w,
                    runtime.clone(),
                );
                break;
            }
            beams /= 2;
        }
    }
    if training && workload.training.precision.fp32_parameters() && workload.training.lora.is_none()
    {
        let mut w = workload.clone();
        w.training.precision = Precision::Bf16;
        consider(
            Change::PureBf16,
            "workload.training.precision: \"bf16\"".into(),
            w,
            runtime.clone(),
        );
    }
    if let (true, Architecture::Decoder(d)) = (training, arch) {
        if workload.training.lora.is_none() {
            let (w, peft_default) = with_suggested_lora(workload, d);
            let what = if peft_default {
                "workload.training.lora: {\"rank\": 16} (peft's default modules)"
            } else {
                "workload.training.lora: {\"rank\": 16, \"target_modules\": [\"all-linear\"]}"
            };
            consider(Change::Lora, what.into(), w, runtime.clone());
        }
        if workload.dtype.is_float() {
            let (w, what) = with_suggested_qlora(workload, d);
            consider(Change::Qlora, what, w, runtime.clone());
        }
    }
    let cap = capacity(workload, runtime);
    if workload.batch > 1 {
        if let Some(b) = max_batch(arch, workload, runtime, cap)? {
            // Training on one card: the same samples per step as `k`
            // micro-batches of `batch / k`, the smallest such `k` whose
            // micro-batch is at most the largest batch that fits (the
            // gradients held through the later micro-batches may still
            // not fit: the estimate decides).
            let accumulating = training && workload.parallel.strategy == Strategy::None;
            if let Some(k) = (2..=workload.batch)
                .find(|k| workload.batch.is_multiple_of(*k) && workload.batch / k <= b)
                .filter(|_| accumulating)
            {
                let mut w = workload.clone();
                w.batch = workload.batch / k;
                w.training.gradient_accumulation_steps = workload
                    .training
                    .gradient_accumulation_steps
                    .saturating_mul(k);
                if w.validate().is_ok() {
                    consider(
                        Change::GradientAccumulation,
                        alloc::format!(
                            "workload.batch: {}, workload.training.gradient_accumulation_steps: {}",
                            w.batch,
                            w.training.gradient_accumulation_steps
                        ),
                        w,
                        runtime.clone(),
                    );
                }
            }
            if b < workload.batch {
                let w = Workload {
                    batch: b,
                    ..workload.clone()
                };
                consider(
                    Change::SmallerBatch,
                    alloc::format!("workload.batch: {b}"),
                    w,
                    runtime.clone(),
                );
            }
        }
    }
    let length = workload.length(vision);
    if let Some(l) = max_length(arch, workload, runtime, cap)? {
        if l < length {
            let w = workload.with_length(vision, l);
            let field = if vision {
                "workload.image_size"
            } else {
                "workload.seq_len"
            };
            consider(
                Change::ShorterLength,
                alloc::format!("{field}: {l}"),
                w,
                runtime.clone(),
            );
        }
    }
    if workload.parallel.strategy == Strategy::None {
        for strategy in crate::search::strategies_for(arch, workload) {
            let peaks = crate::search::rank_peaks(arch, workload, runtime, strategy, 0)?;
            let spread = crate::search::on_gpus(workload, strategy, 2);
            let cap = capacity(&spread, runtime);
            if let Some(n) = crate::search::fewest_gpus(&peaks, cap) {
                if n > 1 {
                    consider(
                        Change::MoreGpus,
                        alloc::format!(
                            "workload.parallel: {{\"strategy\": \"{}\", \"world_size\": {n}}}",
                            strategy.key()
                        ),
                        crate::search::on_gpus(workload, strategy, n),
                        runtime.clone(),
                    );
                }
            }
        }
    }
    if out.is_empty() && training {
        out = combinations(arch, workload, runtime, &estimate_on)?;
    }
    out.sort_by_key(|s| s.change);
    Ok(out)
}

/// `workload` training rank-16 LoRA adapters on one GPU: on peft's default
/// modules, or every linear where peft has no default (Phi-3), which the
/// `bool` says.
fn with_suggested_lora(workload: &Workload, d: &crate::arch::DecoderArch) -> (Workload, bool) {
    let peft_default = crate::families::decoder::has_peft_default_targets(d);
    let mut w = workload.clone();
    w.training.lora = Some(Lora {
        rank: 16,
        alpha: Some(32.0),
        target_modules: if peft_default {
            Vec::new()
        } else {
            alloc::vec!["all-linear".into()]
        },
        dropout: None,
    });
    w.parallel.strategy = Strategy::None;
    w.parallel.world_size = 1;
    (w, peft_default)
}

/// `workload` as QLoRA's recipe trains it, and the change in words: the
/// job's own adapters, or [`with_suggested_lora`]'s, over a 4-bit base
/// with double quantization, paged 8-bit AdamW and `Trainer(bf16=True)`'s
/// autocast. Gradient checkpointing stays as the job has it
/// (`prepare_model_for_kbit_training` turns it on by default; the
/// combinations add it with the other changes), so that QLoRA is weighed
/// against LoRA on equal terms.
fn with_suggested_qlora(workload: &Workload, d: &crate::arch::DecoderArch) -> (Workload, String) {
    let mut parts = alloc::vec![String::from("QLoRA: workload.dtype: \"int4_dq\"")];
    let mut w = if workload.training.lora.is_some() {
        workload.clone()
    } else {
        let (w, peft_default) = with_suggested_lora(workload, d);
        parts.push(String::from(if peft_default {
            "workload.training.lora: {\"rank\": 16}"
        } else {
            "workload.training.lora: {\"rank\": 16, \"target_modules\": [\"all-linear\"]}"
        }));
        w
    };
    parts.push(String::from(
        "workload.training.optimizer: \"paged_adamw_8bit\"",
    ));
    parts.push(String::from("workload.training.precision: \"amp_bf16\""));
    w.dtype = Dtype::Int4Dq;
    w.training.optimizer = Optimizer::PagedAdamw8bit;
    w.training.precision = Precision::AmpBf16;
    (w, parts.join("; "))
}

/// When no single change makes a training job fit: the changes that cost
/// nothing (the allocator setting, the fused optimizer, SDPA,
/// `channels_last`) with gradient checkpointing, then that with one
/// costlier step: the same batch in the fewest micro-batches that fit,
/// LoRA adapters (alone, then in micro-batches), QLoRA where LoRA does
/// not fit (alone, then in micro-batches), FSDP2 over the fewest
/// cards. Each is an exact estimate on the card; a combination is ranked
/// by its costliest change, and its `what` lists every change.
fn combinations(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    estimate_on: &dyn Fn(&Workload, &RuntimeProfile) -> Result<crate::estimate::Estimate, Error>,
) -> Result<Vec<Suggestion>, Error> {
    let vision = arch.is_vision();
    let mut base = workload.clone();
    let mut rt = runtime.clone();
    let mut parts: Vec<String> = Vec::new();
    let mut costliest = Change::ExpandableSegments;
    if !rt.allocator.expandable_segments {
        rt.allocator.expandable_segments = true;
        parts.push("runtime.allocator: \"expandable_segments\"".into());
    }
    if base.training.implementation != OptimizerImpl::Fused
        && matches!(
            base.training.optimizer,
            Optimizer::Adamw | Optimizer::SgdMomentum | Optimizer::Sgd
        )
    {
        base.training.implementation = OptimizerImpl::Fused;
        parts.push("workload.training.implementation: \"fused\"".into());
        costliest = costliest.max(Change::FusedOptimizer);
    }
    if base.attention == Attention::Eager && !vision {
        base.attention = Attention::Sdpa;
        parts.push("workload.attention: \"sdpa\"".into());
        costliest = costliest.max(Change::SdpaAttention);
    }
    if matches!(arch, Architecture::Cnn(_)) && base.memory_format == MemoryFormat::Contiguous {
        base.memory_format = MemoryFormat::ChannelsLast;
        parts.push("workload.memory_format: \"channels_last\"".into());
        costliest = costliest.max(Change::ChannelsLast);
    }
    if !base.training.grad_checkpointing {
        base.training.grad_checkpointing = true;
        parts.push("workload.training.grad_checkpointing: true".into());
        costliest = costliest.max(Change::GradientCheckpointing);
    }
    let mut out = Vec::new();
    let mut found = |change: Change, extra: &[String], w: Workload| -> Result<bool, Error> {
        if w.validate().is_err() || crate::families::validate(arch, &w).is_err() {
            return Ok(false);
        }
        match estimate_on(&w, &rt) {
            Ok(e) if e.fits => {
                let mut what = parts.clone();
                what.extend(extra.iter().cloned());
                out.push(Suggestion {
                    change,
                    what: what.join("; "),
                    workload: w,
                    runtime: rt.clone(),
                    driver_peak: e.driver_peak.0,
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    };
    if found(costliest, &[], base.clone())? {
        return Ok(out);
    }
    // The same samples per step in the fewest micro-batches that fit.
    let micro_batches = |w: &Workload| -> Vec<(Workload, String)> {
        (2..=w.batch)
            .filter(|k| w.batch.is_multiple_of(*k))
            .map(|k| {
                let mut m = w.clone();
                m.batch = w.batch / k;
                m.training.gradient_accumulation_steps =
                    w.training.gradient_accumulation_steps.saturating_mul(k);
                let what = alloc::format!(
                    "workload.batch: {}, workload.training.gradient_accumulation_steps: {}",
                    m.batch,
                    m.training.gradient_accumulation_steps
                );
                (m, what)
            })
            .collect()
    };
    if base.parallel.strategy == Strategy::None {
        for (w, what) in micro_batches(&base) {
            if found(costliest.max(Change::GradientAccumulation), &[what], w)? {
                break;
            }
        }
    }
    if let (Architecture::Decoder(d), None) = (arch, &base.training.lora) {
        let (w, _) = with_suggested_lora(&base, d);
        let lora = String::from("workload.training.lora: {\"rank\": 16}");
        let mut lora_fits = found(Change::Lora, core::slice::from_ref(&lora), w.clone())?;
        if !lora_fits {
            for (m, what) in micro_batches(&w) {
                if found(Change::Lora, &[lora.clone(), what], m)? {
                    lora_fits = true;
                    break;
                }
            }
        }
        // QLoRA where LoRA alone does not fit: its 4-bit base, alone or
        // in micro-batches.
        if !lora_fits && base.dtype.is_float() {
            let (w, qlora) = with_suggested_qlora(&base, d);
            if !found(Change::Qlora, core::slice::from_ref(&qlora), w.clone())? {
                for (m, what) in micro_batches(&w) {
                    if found(Change::Qlora, &[qlora.clone(), what], m)? {
                        break;
                    }
                }
            }
        }
    }
    if base.parallel.strategy == Strategy::None
        && crate::search::strategies_for(arch, &base).contains(&Strategy::Fsdp2)
    {
        // The fewest cards, each rank taking the whole batch or a part of
        // it (`batch` is per rank, so the ranks together take at least the
        // samples a step took on one card); the largest part among those
        // with the fewest cards.
        let mut best: Option<(u32, Workload)> = None;
        for part in (1..=base.batch)
            .rev()
            .filter(|p| base.batch.is_multiple_of(*p))
        {
            let fewer_than = best.as_ref().map_or(u32::MAX, |b| b.0);
            let mut w = base.clone();
            w.batch = part;
            let counts = crate::search::GPU_COUNTS.into_iter();
            for n in counts.filter(|&n| n > 1 && n < fewer_than && n * part >= base.batch) {
                let spread = crate::search::on_gpus(&w, Strategy::Fsdp2, n);
                if spread.validate().is_ok() && estimate_on(&spread, &rt).is_ok_and(|e| e.fits) {
                    best = Some((n, spread));
                    break;
                }
            }
        }
        if let Some((n, w)) = best {
            let mut extra = Vec::new();
            if w.batch != base.batch {
                extra.push(alloc::format!(
                    "workload.batch: {} per rank ({} samples a step over the {n} ranks)",
                    w.batch,
                    w.batch * n
                ));
            }
            extra.push(alloc::format!(
                "workload.parallel: {{\"strategy\": \"fsdp2\", \"world_size\": {n}}}"
            ));
            found(Change::MoreGpus, &extra, w)?;
        }
    }
    Ok(out)
}
