//! Workload specs as JSON: `{"model": ..., "workload": {...}, "runtime": {...}}`.
//!
//! `model` is a preset id (`"llama-3.1-8b"`), a custom architecture
//! (`{"family": "decoder", "hidden_size": ...}`, the serde form of
//! [`Architecture`]), or `{"hf_config": {...}}` holding a Hugging Face
//! `config.json`. `workload` and `runtime` are the objects of a measurement
//! case in `shared/calibration`; a measured case can be fed unchanged
//! (its other fields are ignored).

use crate::arch::{Architecture, CnnArch, Model};
use crate::error::Error;
use crate::presets;
use crate::runtime::RuntimeProfile;
use crate::workload::{Optimizer, Workload};
use alloc::format;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

/// A parsed spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// The model.
    pub model: Model,
    /// The workload.
    pub workload: Workload,
    /// The runtime profile (H200 defaults for absent fields).
    pub runtime: RuntimeProfile,
}

impl Spec {
    /// Parses and validates a spec document.
    pub fn from_json(text: &str) -> Result<Spec, Error> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::Json {
            message: e.to_string(),
        })?;
        Spec::from_value(&value)
    }

    /// Parses and validates a spec from a JSON value.
    pub fn from_value(value: &Value) -> Result<Spec, Error> {
        let obj = value.as_object().ok_or_else(|| {
            Error::invalid(
                "(document)",
                "is not a JSON object",
                "an object with `model`, `workload` and optional `runtime`",
            )
        })?;
        let model = parse_model(obj.get("model"))?;
        let mut workload = parse_workload(obj.get("workload"))?;
        infer_resident_optimizer_state(obj, &mut workload);
        let mut runtime = match obj.get("runtime") {
            None | Some(Value::Null) => RuntimeProfile::default(),
            Some(v) => parse_runtime(v)?,
        };
        infer_backward_history(obj, &workload, &mut runtime);
        workload.validate()?;
        crate::families::validate(&model.arch, &workload)?;
        Ok(Spec {
            model,
            workload,
            runtime,
        })
    }
}

/// A measured case's `weight_bytes` and `measured.resident_before`: what its
/// process held when the case started, against the model's own weights.
fn weights_and_resident(obj: &Map<String, Value>) -> Option<(u64, u64)> {
    let weights = obj.get("weight_bytes").and_then(Value::as_u64)?;
    let resident = obj
        .get("measured")
        .and_then(|m| m.get("resident_before"))
        .and_then(Value::as_u64)?;
    Some((weights, resident))
}

/// A measured case (the `shared/calibration` format) says what its process
/// held when it started: `measured.resident_before` bytes against the
/// model's `weight_bytes`. The harness keeps one optimizer per model, so a
/// training case that starts with more than 1.5x its weights resident
/// started with the state an earlier case created (AdamW and SGD with
/// momentum keep at least one weight-sized buffer per parameter; Adafactor's
/// factored state is too small to tell and stays as given). An explicit
/// `workload.training.optimizer_state_resident` wins.
fn infer_resident_optimizer_state(obj: &Map<String, Value>, workload: &mut Workload) {
    let explicit = obj
        .get("workload")
        .and_then(|w| w.get("training"))
        .and_then(|t| t.get("optimizer_state_resident"))
        .is_some();
    if workload.mode != crate::workload::Mode::Training || explicit {
        return;
    }
    if let Some((weights, resident)) = weights_and_resident(obj) {
        if weights > 0 && resident >= weights.saturating_add(weights / 2) {
            workload.training.optimizer_state_resident = true;
        }
    }
}

/// A measured inference case says whether its process had run a backward
/// pass: autograd's thread then holds a second cuBLAS workspace, so
/// `measured.resident_before` exceeds `weight_bytes` by two workspaces
/// (the public set's BERT, ESM-2 and ResNet-50 processes) rather than one
/// or none (its Llama generation process). Unless the runtime says
/// otherwise, `process_ran_backward` follows.
fn infer_backward_history(
    obj: &Map<String, Value>,
    workload: &Workload,
    runtime: &mut RuntimeProfile,
) {
    let explicit = obj
        .get("runtime")
        .and_then(|r| r.get("process_ran_backward"))
        .is_some();
    if workload.mode != crate::workload::Mode::Inference || explicit {
        return;
    }
    if let Some((weights, resident)) = weights_and_resident(obj) {
        let workspace = runtime.cublas_workspace_bytes.max(1);
        let extra = resident.saturating_sub(weights);
        runtime.process_ran_backward =
            extra.saturating_add(workspace / 2) >= workspace.saturating_mul(2);
    }
}

/// The process history of a file of measured cases, read in file order.
/// The calibration harness runs all cases of one model build in one process
/// and keeps one optimizer: the first training case creates the optimizer
/// state among its freed activations, and later training cases (those
/// that start with the state resident, see `optimizer_state_resident`) find
/// it there. [`ProcessHistory::earlier_job`] names that first case, for
/// [`crate::estimate::estimate_after`]. Builds are told apart by `model`
/// and `weight_bytes`.
#[derive(Clone, Debug, Default)]
pub struct ProcessHistory {
    first_training: alloc::vec::Vec<(String, u64, Workload)>,
}

impl ProcessHistory {
    /// The job that ran before `spec` (parsed from `case`) in its process and
    /// left the state it starts with, if any; records `spec` when it is the
    /// first training job of its build.
    pub fn earlier_job(&mut self, case: &Value, spec: &Spec) -> Option<Workload> {
        if spec.workload.mode != crate::workload::Mode::Training {
            return None;
        }
        let model = case.get("model")?.to_string();
        let weights = case.get("weight_bytes").and_then(Value::as_u64)?;
        let found = self
            .first_training
            .iter()
            .find(|(m, w, _)| *m == model && *w == weights)
            .map(|(_, _, first)| first.clone());
        match found {
            Some(first) if spec.workload.training.optimizer_state_resident => Some(first),
            Some(_) => None,
            None => {
                self.first_training
                    .push((model, weights, spec.workload.clone()));
                None
            }
        }
    }
}

/// Parses the `model` field.
pub fn parse_model(value: Option<&Value>) -> Result<Model, Error> {
    const ALLOWED: &str = "a preset id (string), a custom architecture object with `family`, or {\"hf_config\": {...}}";
    match value {
        None | Some(Value::Null) => Err(Error::missing("model", ALLOWED)),
        Some(Value::String(id)) => Ok(presets::find(id)?.model()),
        Some(Value::Object(map)) => {
            if let Some(config) = map.get("hf_config") {
                let arch = crate::hf_config::import_value(config)?;
                let name = map
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("imported config.json")
                    .to_string();
                return Ok(Model {
                    id: "custom".into(),
                    name,
                    arch,
                });
            }
            let arch: Architecture = serde_json::from_value(Value::Object(map.clone()))
                .map_err(|e| Error::invalid("model", e.to_string(), ALLOWED))?;
            validate_arch(&arch)?;
            Ok(Model {
                id: "custom".into(),
                name: map
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("custom model")
                    .to_string(),
                arch,
            })
        }
        Some(_) => Err(Error::invalid("model", "has the wrong type", ALLOWED)),
    }
}

/// Field names of an encoder's shapes: vocab_size, hidden_size,
/// intermediate_size, num_layers, num_heads.
type EncoderFields = [&'static str; 5];
const ENCODER_FIELDS: EncoderFields = [
    "model.vocab_size",
    "model.hidden_size",
    "model.intermediate_size",
    "model.num_layers",
    "model.num_heads",
];
/// The same, for ESMFold's language-model stem.
const STEM_FIELDS: EncoderFields = [
    "model.stem.vocab_size",
    "model.stem.hidden_size",
    "model.stem.intermediate_size",
    "model.stem.num_layers",
    "model.stem.num_heads",
];

fn validate_encoder(a: &crate::arch::EncoderArch, names: EncoderFields) -> Result<(), Error> {
    use crate::error::check_range;
    const DIM: u64 = 1 << 20;
    let [vocab, hidden, intermediate, layers, heads] = names;
    check_range(vocab, a.vocab_size as u64, 1, 4 * DIM)?;
    check_range(hidden, a.hidden_size as u64, 1, DIM)?;
    check_range(intermediate, a.intermediate_size as u64, 1, 4 * DIM)?;
    check_range(layers, a.num_layers as u64, 1, 1024)?;
    check_range(heads, a.num_heads as u64, 1, 4096)?;
    if !a.hidden_size.is_multiple_of(a.num_heads) {
        return Err(Error::invalid(
            heads,
            format!(
                "{} does not divide hidden_size {}",
                a.num_heads, a.hidden_size
            ),
            "a divisor of hidden_size",
        ));
    }
    Ok(())
}

/// Checks a custom architecture's shapes, naming the field.
pub fn validate_arch(arch: &Architecture) -> Result<(), Error> {
    use crate::error::check_range;
    const DIM: u64 = 1 << 20;
    match arch {
        Architecture::Decoder(a) => {
            check_range("model.vocab_size", a.vocab_size as u64, 1, 4 * DIM)?;
            check_range("model.hidden_size", a.hidden_size as u64, 1, DIM)?;
            check_range(
                "model.intermediate_size",
                a.intermediate_size as u64,
                1,
                4 * DIM,
            )?;
            check_range("model.num_layers", a.num_layers as u64, 1, 1024)?;
            check_range("model.num_heads", a.num_heads as u64, 1, 4096)?;
            check_range(
                "model.num_kv_heads",
                a.num_kv_heads as u64,
                1,
                a.num_heads as u64,
            )?;
            check_range("model.head_dim", a.head_dim as u64, 1, 4096)?;
            if a.num_heads % a.num_kv_heads != 0 {
                return Err(Error::invalid(
                    "model.num_kv_heads",
                    format!(
                        "{} does not divide num_heads {}",
                        a.num_kv_heads, a.num_heads
                    ),
                    "a divisor of num_heads",
                ));
            }
            if let Some(m) = a.moe {
                check_range("model.moe.num_experts", m.num_experts as u64, 1, 1024)?;
                check_range(
                    "model.moe.experts_per_token",
                    m.experts_per_token as u64,
                    1,
                    m.num_experts as u64,
                )?;
                check_range(
                    "model.moe.expert_intermediate_size",
                    m.expert_intermediate_size as u64,
                    1,
                    4 * DIM,
                )?;
            }
        }
        Architecture::Encoder(a) => validate_encoder(a, ENCODER_FIELDS)?,
        Architecture::Vit(a) => {
            check_range("model.patch_size", a.patch_size as u64, 1, 1024)?;
            check_range("model.hidden_size", a.hidden_size as u64, 1, DIM)?;
            check_range("model.mlp_dim", a.mlp_dim as u64, 1, 4 * DIM)?;
            check_range("model.num_layers", a.num_layers as u64, 1, 1024)?;
            check_range("model.num_heads", a.num_heads as u64, 1, 4096)?;
            check_range(
                "model.image_size",
                a.image_size as u64,
                a.patch_size as u64,
                8192,
            )?;
        }
        Architecture::EsmFold(a) => {
            validate_encoder(&a.stem, STEM_FIELDS)?;
            check_range("model.trunk_blocks", a.trunk_blocks as u64, 1, 1024)?;
            check_range(
                "model.pairwise_state_dim",
                a.pairwise_state_dim as u64,
                1,
                4096,
            )?;
            check_range(
                "model.sequence_state_dim",
                a.sequence_state_dim as u64,
                1,
                65536,
            )?;
            check_range("model.max_recycles", a.max_recycles as u64, 0, 64)?;
            // The folding parts' parameters beyond the trunk are replayed
            // as 64 KiB tensors: bounded so a load stays quick.
            check_range(
                "model.folding_params",
                a.folding_params,
                0,
                MAX_FOLDING_PARAMS,
            )?;
        }
        Architecture::Cnn(CnnArch::ResNet {
            blocks,
            num_classes,
            ..
        }) => {
            let fields = [
                "model.blocks[0]",
                "model.blocks[1]",
                "model.blocks[2]",
                "model.blocks[3]",
            ];
            for (field, &n) in fields.into_iter().zip(blocks) {
                check_range(field, n as u64, 1, 256)?;
            }
            check_range("model.num_classes", *num_classes as u64, 1, 4 * DIM)?;
        }
        Architecture::Cnn(CnnArch::MobileNetV2 { num_classes }) => {
            check_range("model.num_classes", *num_classes as u64, 1, 4 * DIM)?;
        }
    }
    let params = param_bound(arch);
    if params > MAX_PARAMS {
        return Err(Error::invalid(
            "model",
            format!("about {} parameters is too large", params as u64),
            "at most 2^50 (about 1.1e15) parameters",
        ));
    }
    Ok(())
}

/// Most parameters a model may have (2^50, about a million times Llama 3.1
/// 405B): with it, no tensor or total of a replay leaves `u64`.
pub const MAX_PARAMS: f64 = (1u64 << 50) as f64;

/// Largest `folding_params` of a custom ESMFold (4.3e9; ESMFold has 0.7e9).
pub const MAX_FOLDING_PARAMS: u64 = 1 << 32;

/// An upper bound on an architecture's parameters, in `f64` (a mixture of
/// experts' own count can leave `u64` for shapes within the per-field
/// ranges).
pub fn param_bound(arch: &Architecture) -> f64 {
    match arch {
        Architecture::Decoder(a) => {
            let n = f64::from;
            let h = n(a.hidden_size);
            let attention = h * (n(a.num_heads) + 2.0 * n(a.num_kv_heads)) * n(a.head_dim) * 2.0;
            let mut mlp = 3.0 * h * n(a.intermediate_size);
            if let Some(m) = a.moe {
                mlp += n(m.num_experts) * 3.0 * h * n(m.expert_intermediate_size)
                    + 3.0 * h * n(m.shared_expert_intermediate_size)
                    + h * n(m.num_experts);
            }
            let norms = (4.0 + n(a.extra_norms_per_layer)) * 2.0 * h;
            let biases = 4.0 * (h + n(a.intermediate_size)) + 3.0 * n(a.num_heads) * n(a.head_dim);
            n(a.num_layers) * (attention + mlp + norms + biases)
                + (2.0 * n(a.vocab_size) + n(a.learned_positions) + 2.0) * h
        }
        other => other.params() as f64,
    }
}

fn field<T: serde::de::DeserializeOwned>(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
    allowed: &str,
) -> Result<Option<T>, Error> {
    match map.get(key) {
        None => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            Error::invalid(&format!("{prefix}.{key}"), clean(&e.to_string()), allowed)
        }),
    }
}

fn clean(message: &str) -> String {
    // serde_json appends " at line 0 column 0" for values; drop it.
    message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_string()
}

fn object<'a>(value: &'a Value, name: &str) -> Result<&'a Map<String, Value>, Error> {
    value
        .as_object()
        .ok_or_else(|| Error::invalid(name, "is not a JSON object", "an object"))
}

const OPTIMIZERS: &str = "\"adamw\", \"sgd\" (momentum 0.9; `momentum: 0` for plain SGD), \"sgd_plain\" or \"adafactor\"";

/// Parses the `workload` field, naming each bad field.
pub fn parse_workload(value: Option<&Value>) -> Result<Workload, Error> {
    let value = value
        .ok_or_else(|| Error::missing("workload", "an object with mode, batch, seq_len, ..."))?;
    let map = object(value, "workload")?;
    let mut w = Workload::default();
    const INT: &str = "a positive integer";
    if let Some(mode) = field(map, "workload", "mode", "\"inference\" or \"training\"")? {
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
    if let Some(dtype) = field(map, "workload", "dtype", "fp32, fp16, bf16, int8 or int4")? {
        w.dtype = dtype;
    }
    if let Some(attention) = field(map, "workload", "attention", "\"sdpa\" or \"eager\"")? {
        w.attention = attention;
    }
    if let Some(load) = field(
        map,
        "workload",
        "load",
        "\"compact\" or \"build_then_cast\"",
    )? {
        w.load = load;
    }
    if let Some(v) = map.get("inference") {
        let m = object(v, "workload.inference")?;
        let p = "workload.inference";
        if let Some(kind) = field(m, p, "kind", "\"generate\" or \"forward\"")? {
            w.inference.kind = kind;
        }
        if let Some(logits) = field(m, p, "logits", "\"last\", \"all\" or \"none\"")? {
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
        if let Some(kv) = field(m, p, "kv_dtype", "null, fp32, fp16, bf16, int8 or int4")? {
            w.inference.kv_dtype = kv;
        }
    }
    if let Some(v) = map.get("training") {
        let m = object(v, "workload.training")?;
        let p = "workload.training";
        if let Some(o) = field::<String>(m, p, "optimizer", OPTIMIZERS)? {
            w.training.optimizer = match o.as_str() {
                "adamw" => Optimizer::Adamw,
                "sgd" | "sgd_momentum" => Optimizer::SgdMomentum,
                "sgd_plain" => Optimizer::Sgd,
                "adafactor" => Optimizer::Adafactor,
                other => {
                    return Err(Error::invalid(
                        "workload.training.optimizer",
                        format!("unknown optimizer `{other}`"),
                        OPTIMIZERS,
                    ))
                }
            };
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
        if let Some(prec) = field(m, p, "precision", "\"amp_bf16\", \"bf16\" or \"fp32\"")? {
            w.training.precision = prec;
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
    if let Some(v) = map.get("esmfold") {
        let m = object(v, "workload.esmfold")?;
        let p = "workload.esmfold";
        if let Some(d) = field(m, p, "stem_dtype", "fp32, fp16 or bf16")? {
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
    Ok(w)
}

/// Parses the `runtime` field (H200 defaults for absent coefficients).
pub fn parse_runtime(value: &Value) -> Result<RuntimeProfile, Error> {
    object(value, "runtime")?;
    serde_json::from_value(value.clone()).map_err(|e| {
        Error::invalid(
            "runtime",
            clean(&e.to_string()),
            "an object of byte counts (cuda_context_bytes, cublas_library_bytes, ...) and `allocator`",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[track_caller]
    fn check_err(json: &str, expected: &[&str]) {
        let err = Spec::from_json(json).unwrap_err().to_string();
        for needle in expected {
            assert!(err.contains(needle), "error `{err}` lacks `{needle}`");
        }
    }

    #[test]
    fn a_later_training_case_starts_with_the_optimizer_state_resident() {
        let case = |resident: u64, explicit: &str| {
            let text = format!(
                r#"{{"case": "x", "model": "gpt2", "weight_bytes": 1000, "workload": {{"mode": "training", "training": {{"optimizer": "adamw"{explicit}}}}}, "measured": {{"driver_peak": 1, "resident_before": {resident}}}}}"#
            );
            Spec::from_json(&text)
                .unwrap()
                .workload
                .training
                .optimizer_state_resident
        };
        assert!(!case(1000, ""), "weights only: a first case");
        assert!(!case(1499, ""), "weights and workspaces");
        assert!(case(3000, ""), "weights and AdamW state");
        assert!(
            !case(3000, r#", "optimizer_state_resident": false"#),
            "explicit wins"
        );
    }

    #[test]
    fn an_inference_case_says_whether_its_process_ran_backward() {
        let ws: u64 = 32 << 20;
        let case = |resident: u64, explicit: &str| {
            let text = format!(
                r#"{{"case": "x", "model": "gpt2", "weight_bytes": 1000, "workload": {{"mode": "inference"}}, "runtime": {{"allocator": "default"{explicit}}}, "measured": {{"driver_peak": 1, "resident_before": {resident}}}}}"#
            );
            Spec::from_json(&text).unwrap().runtime.process_ran_backward
        };
        assert!(!case(1000, ""), "weights only: a fresh process");
        assert!(!case(1000 + ws, ""), "one workspace: inference before");
        assert!(
            case(1000 + 2 * ws + 280, ""),
            "two workspaces: a backward ran"
        );
        assert!(
            case(1000, r#", "process_ran_backward": true"#),
            "explicit wins"
        );
    }

    #[test]
    fn a_measured_case_parses_unchanged() {
        let case = r#"{"case": "x", "model": "llama-3.1-8b", "params": 1, "workload": {"mode": "inference", "batch": 8, "seq_len": 4096, "dtype": "bf16", "inference": {"kind": "generate", "logits": "last", "kv_cache": true, "new_tokens": 16}, "attention": "sdpa"}, "runtime": {"gpu": "NVIDIA H200", "gpu_total_bytes": 150754820096, "driver": "580.159.04", "torch": "2.11.0+cu130", "cuda": "13.0", "transformers": "5.17.0", "allocator": "default"}, "measured": {"driver_peak": 1}}"#;
        let spec = Spec::from_json(case).unwrap();
        assert_eq!(spec.workload.batch, 8);
        assert_eq!(spec.workload.seq_len, 4096);
        assert_eq!(
            spec.runtime.cuda_context_bytes,
            RuntimeProfile::h200().cuda_context_bytes
        );
    }

    #[test]
    fn bad_inputs_name_the_field_and_range() {
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"batch": 0}}"#,
            &["workload.batch", "1 to 65536"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"batch": -3}}"#,
            &["workload.batch", "1 to 65536"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"seq_len": 1e30}}"#,
            &["workload.seq_len"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"seq_len": 99999999999}}"#,
            &["workload.seq_len", "4194304"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"dtype": "fp8"}}"#,
            &["workload.dtype", "fp16"],
        );
        check_err(
            r#"{"model": "nope", "workload": {}}"#,
            &["unknown preset `nope`", "llama-3.1-8b"],
        );
        check_err(r#"{"model": "llama-3.1-8b""#, &["malformed JSON"]);
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"seq_len": NaN}}"#,
            &["malformed JSON"],
        );
        check_err(r#"{"workload": {}}"#, &["`model` is missing"]);
        check_err(r#"[1, 2]"#, &["not a JSON object"]);
        check_err(
            r#"{"model": {"family": "decoder", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 3, "head_dim": 16, "tie_word_embeddings": true, "mlp": "gated", "norm": "rms_norm"}, "workload": {}}"#,
            &["model.num_kv_heads", "divisor"],
        );
    }
}
