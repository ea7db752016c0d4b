//! The spec's `workload` object read field by field, each bad field named
//! with what it accepts, and its `parallel` strategy.

use super::{dtype_field, field, key_field, known_keys, member, object};
use crate::arch::Dtype;
use crate::error::Error;
use crate::keys::one_of;
use crate::parallel::{ParallelOptions, Strategy};
use crate::workload::{
    Attention, Head, InferenceKind, LoadPath, Logits, MemoryFormat, Mode, Optimizer, OptimizerImpl,
    Precision, Workload,
};
use alloc::format;
use serde_json::Value;

const OPTIMIZERS: &str = "\"adamw\", \"sgd\" (momentum 0.9; `momentum: 0` for plain SGD), \"sgd_plain\", \"adafactor\", \"adamw_8bit\", \"paged_adamw_8bit\" or \"paged_adamw_32bit\"";
const FLOAT_DTYPES: &[&str] = &["fp32", "fp16", "bf16"];
/// A KV cache's dtypes: the float formats and the quantized caches' 8 and
/// 4 bits (bitsandbytes' double quantization is a weights' format).
const KV_DTYPES: &[&str] = &["fp32", "fp16", "bf16", "int8", "int4"];

/// Parses the `workload` field, naming each bad field.
pub fn parse_workload(value: Option<&Value>) -> Result<Workload, Error> {
    let value = value
        .ok_or_else(|| Error::missing("workload", "an object with mode, batch, seq_len, ..."))?;
    let map = object(value, "workload")?;
    known_keys::check(
        map,
        "workload",
        &[known_keys::WORKLOAD, known_keys::WORKLOAD_NOTES],
    )?;
    let mut w = Workload::default();
    const INT: &str = "a positive integer";
    let p = "workload";
    if let Some(mode) = key_field(map, p, "mode", Mode::from_key, Mode::KEYS, None)? {
        w.mode = mode;
    }
    if let Some(batch) = field::<u64>(map, "workload", "batch", "an integer from 1 to 65536")? {
        crate::error::check_range("workload.batch", batch, 1, crate::workload::MAX_BATCH)?;
        w.batch = batch as u32;
    }
    if let Some(seq) = field::<u64>(map, "workload", "seq_len", "an integer from 1 to 4194304")? {
        crate::error::check_range("workload.seq_len", seq, 1, crate::workload::MAX_SEQ_LEN)?;
        w.seq_len = seq as u32;
    }
    if let Some(size) =
        field::<Option<u64>>(map, "workload", "image_size", "an integer from 16 to 8192")?
    {
        if let Some(size) = size {
            crate::error::check_range(
                "workload.image_size",
                size,
                16,
                crate::workload::MAX_IMAGE_SIZE,
            )?;
        }
        w.image_size = size.map(|s| s as u32);
    }
    if let Some(Some(dtype)) = dtype_field(map, p, "dtype", false, Dtype::KEYS)? {
        w.dtype = dtype;
    }
    let attention = key_field(
        map,
        p,
        "attention",
        Attention::from_key,
        Attention::KEYS,
        None,
    )?;
    if let Some(attention) = attention {
        w.attention = attention;
    }
    if let Some(load) = key_field(map, p, "load", LoadPath::from_key, LoadPath::KEYS, None)? {
        w.load = load;
    }
    let memory_format = key_field(
        map,
        p,
        "memory_format",
        MemoryFormat::from_key,
        MemoryFormat::KEYS,
        None,
    )?;
    if let Some(memory_format) = memory_format {
        w.memory_format = memory_format;
    }
    if let Some(padded) = field(map, p, "padded", "true or false")? {
        w.padded = padded;
    }
    if let Some(head) = key_field(map, p, "head", Head::from_key, Head::KEYS, None)? {
        w.head = head;
    }
    // `null` is the default (two labels with a classification head), as
    // the collector writes a workload back.
    if let Some(Some(labels)) =
        field::<Option<u64>>(map, p, "num_labels", "an integer from 1 to 1000000")?
    {
        crate::error::check_range(
            "workload.num_labels",
            labels,
            1,
            crate::workload::MAX_LABELS,
        )?;
        w.num_labels = Some(labels as u32);
    }
    if let Some(v) = member(map, "inference") {
        let m = object(v, "workload.inference")?;
        let p = "workload.inference";
        known_keys::check(m, p, &[known_keys::INFERENCE])?;
        let kind = key_field(
            m,
            p,
            "kind",
            InferenceKind::from_key,
            InferenceKind::KEYS,
            None,
        )?;
        if let Some(kind) = kind {
            w.inference.kind = kind;
        }
        if let Some(logits) = key_field(m, p, "logits", Logits::from_key, Logits::KEYS, None)? {
            w.inference.logits = logits;
        }
        if let Some(kv) = field(m, p, "kv_cache", "true or false")? {
            w.inference.kv_cache = kv;
        }
        if let Some(n) = field::<u64>(m, p, "new_tokens", "an integer from 0 to 1048576")? {
            crate::error::check_range(
                "workload.inference.new_tokens",
                n,
                0,
                crate::workload::MAX_NEW_TOKENS,
            )?;
            w.inference.new_tokens = n as u32;
        }
        if let Some(kv) = dtype_field(m, p, "kv_dtype", true, KV_DTYPES)? {
            if kv == Some(Dtype::Int4Dq) {
                return Err(Error::invalid(
                    "workload.inference.kv_dtype",
                    "`int4_dq` is a format of weights",
                    &format!("null, {}", one_of(KV_DTYPES)),
                ));
            }
            w.inference.kv_dtype = kv;
        }
        if let Some(n) = field::<u64>(m, p, "batches", "an integer from 1 to 1000000")? {
            crate::error::check_range(
                "workload.inference.batches",
                n,
                1,
                crate::workload::MAX_INFERENCE_BATCHES,
            )?;
            w.inference.batches = n as u32;
        }
        if let Some(n) = field::<u64>(m, p, "num_beams", "an integer from 1 to 1024")? {
            crate::error::check_range(
                "workload.inference.num_beams",
                n,
                1,
                crate::workload::MAX_BEAMS,
            )?;
            w.inference.num_beams = n as u32;
        }
        if let Some(keep) = field(m, p, "output_scores", "true or false")? {
            w.inference.output_scores = keep;
        }
        if let Some(keep) = field(m, p, "output_logits", "true or false")? {
            w.inference.output_logits = keep;
        }
        if let Some(run) = field(m, p, "logits_processors", "true or false")? {
            w.inference.logits_processors = run;
        }
    }
    if let Some(v) = member(map, "training") {
        let m = object(v, "workload.training")?;
        let p = "workload.training";
        known_keys::check(m, p, &[known_keys::TRAINING, known_keys::TRAINING_NOTES])?;
        let optimizer = key_field(
            m,
            p,
            "optimizer",
            Optimizer::from_key,
            Optimizer::KEYS,
            Some(OPTIMIZERS),
        )?;
        if let Some(optimizer) = optimizer {
            w.training.optimizer = optimizer;
        }
        let implementation = key_field(
            m,
            p,
            "implementation",
            OptimizerImpl::from_key,
            OptimizerImpl::KEYS,
            None,
        )?;
        if let Some(implementation) = implementation {
            w.training.implementation = implementation;
        }
        // `"sgd"` is SGD with momentum (0.9) as the measurement format
        // describes it; `"momentum": 0` makes it plain SGD.
        if let Some(momentum) = field::<f64>(m, p, "momentum", "a number from 0 to 1")? {
            if !(0.0..=1.0).contains(&momentum) {
                return Err(Error::invalid(
                    "workload.training.momentum",
                    format!("{momentum} is out of range"),
                    "a number from 0 to 1",
                ));
            }
            w.training.optimizer = match (w.training.optimizer, momentum == 0.0) {
                (Optimizer::Sgd | Optimizer::SgdMomentum, true) => Optimizer::Sgd,
                (Optimizer::Sgd | Optimizer::SgdMomentum, false) => Optimizer::SgdMomentum,
                (other, _) => other,
            };
        }
        if let Some(s) = field::<u64>(m, p, "steps", "an integer from 1 to 1000")? {
            crate::error::check_range("workload.training.steps", s, 1, crate::workload::MAX_STEPS)?;
            w.training.steps = s as u32;
        }
        if let Some(n) = field::<u64>(
            m,
            p,
            "gradient_accumulation_steps",
            "an integer from 1 to 1000",
        )? {
            crate::error::check_range(
                "workload.training.gradient_accumulation_steps",
                n,
                1,
                crate::workload::MAX_STEPS,
            )?;
            w.training.gradient_accumulation_steps = n as u32;
        }
        let precision = key_field(
            m,
            p,
            "precision",
            Precision::from_key,
            Precision::KEYS,
            None,
        )?;
        if let Some(precision) = precision {
            w.training.precision = precision;
        }
        if let Some(gc) = field(m, p, "grad_checkpointing", "true or false")? {
            w.training.grad_checkpointing = gc;
        }
        if let Some(use_cache) = field(m, p, "use_cache", "true or false")? {
            w.training.use_cache = use_cache;
        }
        if let Some(resident) = field(m, p, "optimizer_state_resident", "true or false")? {
            w.training.optimizer_state_resident = resident;
        }
        if let Some(lora) = field(
            m,
            p,
            "lora",
            "null or {rank: 1..65536, alpha, target_modules: [names], dropout}",
        )? {
            w.training.lora = lora;
        }
        let _ = INT;
    }
    if let Some(v) = member(map, "parallel") {
        w.parallel = parse_parallel(v)?;
    }
    if let Some(v) = member(map, "esmfold") {
        let m = object(v, "workload.esmfold")?;
        let p = "workload.esmfold";
        known_keys::check(m, p, &[known_keys::ESMFOLD])?;
        if let Some(Some(d)) = dtype_field(m, p, "stem_dtype", false, FLOAT_DTYPES)? {
            w.esmfold.stem_dtype = d;
        }
        if let Some(c) =
            field::<Option<u64>>(m, p, "chunk_size", "null or an integer from 1 to 4194304")?
        {
            if let Some(c) = c {
                crate::error::check_range(
                    "workload.esmfold.chunk_size",
                    c,
                    1,
                    crate::workload::MAX_SEQ_LEN,
                )?;
            }
            w.esmfold.chunk_size = c.map(|c| c as u32);
        }
        if let Some(r) =
            field::<Option<u64>>(m, p, "num_recycles", "null or an integer from 0 to 64")?
        {
            if let Some(r) = r {
                crate::error::check_range("workload.esmfold.num_recycles", r, 0, 64)?;
            }
            w.esmfold.num_recycles = r.map(|r| r as u32);
        }
    }
    // The one choice without a default: estimating inference when training
    // was meant (or the reverse) would be silently wrong.
    if !map.contains_key("mode") {
        return Err(Error::missing("workload.mode", &one_of(Mode::KEYS)));
    }
    Ok(w)
}

/// Parses `workload.parallel`. The measurement format's descriptions of how
/// the harness wrapped and built the model (`wrap`, `init`) are read as
/// notes; the model is wrapped per decoder layer, then the root.
fn parse_parallel(value: &Value) -> Result<ParallelOptions, Error> {
    let m = object(value, "workload.parallel")?;
    let p = "workload.parallel";
    known_keys::check(m, p, &[known_keys::PARALLEL, known_keys::PARALLEL_NOTES])?;
    let mut parallel = ParallelOptions::default();
    if let Some(strategy) = key_field(m, p, "strategy", Strategy::from_key, Strategy::KEYS, None)? {
        parallel.strategy = strategy;
    }
    if let Some(n) = field::<u64>(m, p, "world_size", "an integer from 1 to 4096")? {
        crate::error::check_range(
            "workload.parallel.world_size",
            n,
            1,
            crate::parallel::MAX_WORLD_SIZE,
        )?;
        parallel.world_size = n as u32;
    }
    if let Some(r) = field(m, p, "reshard_after_forward", "true or false")? {
        parallel.reshard_after_forward = r;
    }
    if let Some(Some(d)) = dtype_field(m, p, "param_dtype", false, FLOAT_DTYPES)? {
        parallel.param_dtype = d;
    }
    if let Some(Some(d)) = dtype_field(m, p, "reduce_dtype", false, FLOAT_DTYPES)? {
        parallel.reduce_dtype = d;
    }
    if let Some(mb) = field::<u64>(m, p, "bucket_cap_mb", "an integer from 1 to 65536")? {
        crate::error::check_range("workload.parallel.bucket_cap_mb", mb, 1, 65_536)?;
        parallel.bucket_cap_mb = mb as u32;
    }
    if let Some(view) = field(m, p, "gradient_as_bucket_view", "true or false")? {
        parallel.gradient_as_bucket_view = view;
    }
    Ok(parallel)
}
