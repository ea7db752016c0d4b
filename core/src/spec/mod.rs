//! Workload specs as JSON: `{"model": ..., "workload": {...}, "runtime": {...}}`.
//!
//! `model` is a preset id (`"llama-3.1-8b"`), a custom architecture
//! (`{"family": "decoder", "hidden_size": ...}`, the serde form of
//! [`Architecture`]), or `{"hf_config": {...}}` holding a Hugging Face
//! `config.json`. `workload` and `runtime` are the objects of a measurement
//! case in `measurements/public/`; a measured case can be fed unchanged
//! (its other fields are ignored). Workload words (modes, dtypes, kernels,
//! optimizers, precisions, ...) are read by their enum's `from_key`
//! ([`crate::keys`]).

use crate::arch::Dtype;
use crate::arch::{Architecture, Model};
use crate::error::Error;
use crate::keys::one_of;
use crate::parallel::{ParallelOptions, Strategy};
use crate::presets;
use crate::runtime::{AllocatorConfig, RuntimeProfile};
use crate::workload::{
    Attention, Head, InferenceKind, LoadPath, Logits, MemoryFormat, Mode, Optimizer, OptimizerImpl,
    Precision, Workload,
};
pub mod framework;
pub mod json;
pub mod known_keys;
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
        let value = json::parse(text)?;
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
        known_keys::check(obj, "", &[known_keys::SPEC, known_keys::CASE_NOTES])?;
        let model = parse_model(hub_resolved(member(obj, "model"))?.as_ref())?;
        // A job described through its framework, lowered to knobs first.
        let lowered;
        let mut fresh_inference_process = false;
        let workload_value = match member(obj, "workload") {
            Some(w) if framework::is_framework_workload(w) => {
                let (w, how) = framework::lower(w, &model.arch)?;
                fresh_inference_process = how.fresh_inference_process;
                lowered = w;
                Some(&lowered)
            }
            other => other,
        };
        let mut workload = parse_workload(workload_value)?;
        infer_resident_optimizer_state(obj, &mut workload);
        // A note of measured cases ([`ProcessHistory`]), read here and not
        // by `parse_runtime` (the page parses runtimes without it).
        let mut runtime_value = member(obj, "runtime").cloned();
        if let Some(Value::Object(r)) = runtime_value.as_mut() {
            let builds = r.remove("process_builds_before");
            if builds.is_some_and(|b| b.as_u64().is_none_or(|n| n > u64::from(u32::MAX))) {
                return Err(Error::invalid(
                    "runtime.process_builds_before",
                    "is not a count of model builds",
                    "a whole number from 0",
                ));
            }
        }
        let mut runtime = match runtime_value {
            None | Some(Value::Null) => RuntimeProfile::default(),
            Some(v) => parse_runtime(&v)?,
        };
        let backward_stated = obj
            .get("runtime")
            .and_then(|r| r.get("process_ran_backward"))
            .is_some();
        if fresh_inference_process && !backward_stated {
            runtime.process_ran_backward = false;
        }
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

/// A `model` given as a Hugging Face Hub id (`org/name`), as the preset
/// it names ([`crate::presets::find_by_hub_id`]); any other `model` as it is.
fn hub_resolved(model: Option<&Value>) -> Result<Option<Value>, Error> {
    let Some(Value::String(id)) = model else {
        return Ok(model.cloned());
    };
    if !id.contains('/') {
        return Ok(model.cloned());
    }
    match crate::presets::find_by_hub_id(id) {
        Some(preset) => Ok(Some(Value::from(preset.id))),
        None => Err(Error::invalid(
            "model",
            format!("`{id}` is a Hugging Face Hub id headroom has no preset for"),
            "a preset id, the Hub id of a preset (`meta-llama/Llama-3.1-8B`, `Qwen/Qwen2.5-7B-Instruct`, ...), or the model's config.json as `{\"hf_config\": {...}}`",
        )),
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

#[cfg(feature = "diagnostics")]
/// How a measured case ran (the harness and the public set alike): the model
/// built directly on the GPU, then every case started after
/// `empty_cache()` and `reset_peak_memory_stats()`. For ESMFold, whose
/// `__init__` builds the ESM-2 stem in fp32 and casts it, that is a
/// `build_then_cast` load (unless `case` names its `workload.load`) whose
/// cast leaves holes in the segments it shared with kept weights; other
/// models are built in their own dtype, as compact as loaded ones. Sets
/// `spec`'s load and returns the replay options to estimate it with.
///
/// A case whose peak is its whole process's (`measured.peak_window:
/// "process"`: a `run --cmd` job that reports no case time, so the
/// collector's window is the process from start to end) is replayed as
/// `estimate` replays a job: the load included, its cache kept.
fn as_measured(case: &Value, spec: &mut Spec) -> crate::families::ReplayOptions {
    let explicit = case.get("workload").and_then(|w| w.get("load")).is_some();
    if !explicit && matches!(spec.model.arch, Architecture::EsmFold(_)) {
        spec.workload.load = crate::workload::LoadPath::BuildThenCast;
    }
    let whole_process = case
        .get("measured")
        .and_then(|m| m.get("peak_window"))
        .and_then(Value::as_str)
        == Some("process");
    crate::families::ReplayOptions {
        cache_emptied_after_load: !whole_process,
        ..Default::default()
    }
}

#[cfg(feature = "diagnostics")]
/// The allocator limit a measured case ran under (`allocator_limit_bytes`:
/// `run --capacity`, `torch.cuda.set_per_process_memory_fraction`), if any.
pub fn allocator_limit_of(case: &Value) -> Result<Option<u64>, Error> {
    match case.get("allocator_limit_bytes") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(Error::invalid(
                "allocator_limit_bytes",
                "is not a positive whole number of bytes",
                "the bytes torch's allocator may reserve, from 1",
            )),
        },
    }
}

#[cfg(feature = "diagnostics")]
/// Estimates a measured case (`case`, parsed into `spec`) as it ran: loaded
/// as [`as_measured`] says, after the jobs its process ran before it
/// ([`ProcessHistory::earlier_jobs`], which also records this case for the
/// cases after it in the file). `check`, `fit` and the accuracy tests
/// predict every measured case this way.
pub fn estimate_as_measured(
    case: &Value,
    spec: &mut Spec,
    history: &mut ProcessHistory,
) -> Result<crate::estimate::Estimate, Error> {
    let options = crate::estimate::EstimateOptions {
        replay: as_measured(case, spec),
        allocator_limit: allocator_limit_of(case)?,
        ..Default::default()
    };
    let chain = history.earlier_jobs(case, spec);
    let earlier: alloc::vec::Vec<crate::estimate::EarlierJob> = chain
        .iter()
        .map(|(arch, workload)| crate::estimate::EarlierJob { arch, workload })
        .collect();
    crate::estimate::estimate_in_process(
        &earlier,
        &spec.model.arch,
        &spec.workload,
        &spec.runtime,
        options,
    )
}

/// A measured case (the `measurements/public/` format) says what its process
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
/// it there; a training case without the state resident made a new one
/// (it ran in a process of its own). [`ProcessHistory::earlier_job`] names
/// the case that made the state, for
/// [`crate::estimate::estimate_after`]. Inference cases likewise: one that
/// starts with at least a cuBLAS workspace resident beyond its weights,
/// in a process that ran no backward, ran after the first inference case
/// of its build in the file, whose first matmul created the workspace
/// inside one of its segments; that segment stays reserved, its free part
/// the next cases' (ResNet-50 fp32 b32 at 512 px after b64 at 224 px: its
/// images land in the 196 MiB segment the earlier case's workspace keeps,
/// `measurements/inference-batches/`), and each later case leaves it as
/// it found it. Builds are told apart by `model`,
/// `weight_bytes`, the dtype and the attention kernel.
///
/// A case whose `runtime.process_builds_before` is k > 0 ran in a process
/// that had built, run and dropped the k builds before its own in the file
/// (`headroom_measure.py --batch --one-process`, a notebook's order):
/// [`ProcessHistory::earlier_jobs`] replays, before the case's own
/// history, each of those builds' first case and its first training case,
/// the jobs that create the process's cuBLAS workspaces.
#[derive(Clone, Debug, Default)]
pub struct ProcessHistory {
    first_training: alloc::vec::Vec<(String, u64, Workload)>,
    first_inference: alloc::vec::Vec<(String, u64, Workload)>,
    /// The file's builds in order, each with the jobs of it that a later
    /// build's process history replays.
    builds: alloc::vec::Vec<((String, u64), Architecture, alloc::vec::Vec<Workload>)>,
}

impl ProcessHistory {
    /// The jobs that ran before `spec` (parsed from `case`) in its process
    /// and left the state it starts with, oldest first, each with its
    /// model: the earlier builds' jobs (when `runtime.process_builds_before`
    /// says there were any), then the case's own build's earlier job
    /// ([`ProcessHistory::earlier_job`]).
    pub fn earlier_jobs(
        &mut self,
        case: &Value,
        spec: &Spec,
    ) -> alloc::vec::Vec<(Architecture, Workload)> {
        use crate::workload::Mode::Training;
        let own_build = self.earlier_job(case, spec);
        let key = (
            case.get("model").map(|m| m.to_string()).unwrap_or_default(),
            case.get("weight_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        );
        if self.builds.last().is_none_or(|(last, ..)| *last != key) {
            let arch = spec.model.arch.clone();
            self.builds.push((key, arch, alloc::vec::Vec::new()));
        }
        let builds_before = case
            .get("runtime")
            .and_then(|r| r.get("process_builds_before"))
            .and_then(Value::as_u64)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let current = self.builds.len() - 1;
        let mut chain = alloc::vec::Vec::new();
        if builds_before == 0 {
            chain.extend(own_build.map(|w| (spec.model.arch.clone(), w)));
        } else {
            // Everything the process ran: the earlier builds' jobs, then
            // this build's so far.
            for (_, arch, jobs) in &self.builds[current.saturating_sub(builds_before)..] {
                chain.extend(jobs.iter().map(|w| (arch.clone(), w.clone())));
            }
        }
        // This build's first case, and its first training case: the jobs
        // that create the process's workspaces and the optimizer state.
        let jobs = &mut self.builds[current].2;
        let training = spec.workload.mode == Training;
        if jobs.is_empty() || (training && !jobs.iter().any(|w| w.mode == Training)) {
            jobs.push(spec.workload.clone());
        }
        chain
    }

    /// The job that ran before `spec` (parsed from `case`) in its process and
    /// left the state it starts with, if any; records `spec` when it is the
    /// first training or inference job of its build.
    pub fn earlier_job(&mut self, case: &Value, spec: &Spec) -> Option<Workload> {
        let build = |case: &Value, spec: &Spec| -> Option<(String, u64)> {
            let model = case.get("model")?.to_string();
            let weights = case.get("weight_bytes").and_then(Value::as_u64)?;
            let attention = spec.workload.attention.key();
            let dtype = spec.workload.dtype.key();
            Some((alloc::format!("{model} {dtype} {attention}"), weights))
        };
        let (model, weights) = build(case, spec)?;
        if spec.workload.mode == crate::workload::Mode::Inference {
            let slot = self
                .first_inference
                .iter()
                .position(|(m, w, _)| *m == model && *w == weights);
            let earlier = slot.map(|i| self.first_inference[i].2.clone());
            if slot.is_none() {
                self.first_inference
                    .push((model, weights, spec.workload.clone()));
            }
            let resident = case
                .get("measured")
                .and_then(|m| m.get("resident_before"))
                .and_then(Value::as_u64)?;
            let workspace = spec.runtime.cublas_workspace_bytes.max(1);
            let kept_workspace = resident >= weights.saturating_add(workspace);
            return earlier.filter(|_| kept_workspace && !spec.runtime.process_ran_backward);
        }
        let slot = self
            .first_training
            .iter()
            .position(|(m, w, _)| *m == model && *w == weights);
        match slot {
            Some(i) if spec.workload.training.optimizer_state_resident => {
                Some(self.first_training[i].2.clone())
            }
            // A training case without the state resident ran in a process
            // of its own: it creates the optimizer the cases after it find.
            Some(i) => {
                self.first_training[i].2 = spec.workload.clone();
                None
            }
            None => {
                self.first_training
                    .push((model, weights, spec.workload.clone()));
                None
            }
        }
    }
}

/// A custom architecture object, by its `family`. Each family's fields are
/// read by that family's own reader: serde's reader for the tagged enum
/// buffers the object first and compiles every family's reader a second
/// time for the buffer (11 KB of the page's gzipped bundle).
fn custom_arch(map: &serde_json::Map<String, Value>) -> Result<Architecture, Error> {
    const FAMILIES: &str = "decoder, encoder, vit, esm_fold or cnn";
    fn read<T: serde::de::DeserializeOwned>(
        map: &serde_json::Map<String, Value>,
    ) -> Result<T, Error> {
        let mut shapes = map.clone();
        for key in known_keys::CUSTOM_MODEL {
            shapes.remove(*key);
        }
        serde_json::from_value(Value::Object(shapes)).map_err(|e| {
            let message = e.to_string();
            unknown_field("model", &message, known_keys::CUSTOM_MODEL)
                .unwrap_or_else(|| Error::invalid("model", message, ALLOWED_MODEL))
        })
    }
    Ok(match member(map, "family").and_then(Value::as_str) {
        Some("decoder") => Architecture::Decoder(read(map)?),
        Some("encoder") => Architecture::Encoder(read(map)?),
        Some("vit") => Architecture::Vit(read(map)?),
        Some("esm_fold") => Architecture::EsmFold(read(map)?),
        Some("cnn") => Architecture::Cnn(read(map)?),
        Some(other) => {
            return Err(Error::invalid(
                "model.family",
                alloc::format!("unknown family `{other}`"),
                FAMILIES,
            ))
        }
        None => return Err(Error::missing("model.family", FAMILIES)),
    })
}

/// What `model` may be.
const ALLOWED_MODEL: &str =
    "a preset id (string), a custom architecture object with `family`, or {\"hf_config\": {...}}";

/// Parses the `model` field.
pub fn parse_model(value: Option<&Value>) -> Result<Model, Error> {
    const ALLOWED: &str = ALLOWED_MODEL;
    match value {
        None | Some(Value::Null) => Err(Error::missing("model", ALLOWED)),
        Some(Value::String(id)) => Ok(presets::find(id)?.model()),
        Some(Value::Object(map)) => {
            if let Some(config) = member(map, "hf_config") {
                known_keys::check(map, "model", &[known_keys::HF_MODEL])?;
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
            let arch = custom_arch(map)?;
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

/// Checks a custom architecture's shapes (see [`crate::arch::validate_arch`]).
pub use crate::arch::validate_arch;

/// `map[key]`. Not inlined: one copy of the map's search serves every
/// reader (each inlined copy weighed on the page's bundle).
#[inline(never)]
fn member<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key)
}

fn field<T: serde::de::DeserializeOwned>(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
    allowed: &str,
) -> Result<Option<T>, Error> {
    match member(map, key) {
        None => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| {
            let field = format!("{prefix}.{key}");
            let message = clean(&e.to_string());
            unknown_field(&field, &message, &[])
                .unwrap_or_else(|| Error::invalid(&field, message, allowed))
        }),
    }
}

/// serde's `unknown field `x`, expected one of `a`, `b`` (from a struct
/// that denies unknown fields) as the unknown-key error of the object at
/// `prefix`, whose keys are those serde lists and `also`.
fn unknown_field(prefix: &str, message: &str, also: &[&str]) -> Option<Error> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let listed = expected.split('`').skip(1).step_by(2);
    Some(known_keys::unknown_key(
        prefix,
        key,
        listed.chain(also.iter().copied()),
    ))
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

/// A workload word: a string that `from_key` knows, named in the error by
/// its field and the keys it accepts (`allowed`, else `keys` as prose).
fn key_field<T>(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
    from_key: fn(&str) -> Option<T>,
    keys: &[&str],
    allowed: Option<&str>,
) -> Result<Option<T>, Error> {
    let allowed = || allowed.map_or_else(|| one_of(keys), String::from);
    match member(map, key) {
        None => Ok(None),
        Some(Value::String(word)) => match from_key(word) {
            Some(value) => Ok(Some(value)),
            None => Err(Error::invalid(
                &format!("{prefix}.{key}"),
                format!("unknown {key} `{word}`"),
                &allowed(),
            )),
        },
        Some(_) => Err(Error::invalid(
            &format!("{prefix}.{key}"),
            "is not a string",
            &allowed(),
        )),
    }
}

/// A dtype field; `nullable` accepts `null` (read as `Some(None)`).
fn dtype_field(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
    nullable: bool,
    keys: &[&str],
) -> Result<Option<Option<Dtype>>, Error> {
    if nullable && matches!(member(map, key), Some(Value::Null)) {
        return Ok(Some(None));
    }
    let allowed = if nullable {
        format!("null, {}", one_of(keys))
    } else {
        one_of(keys)
    };
    Ok(key_field(map, prefix, key, Dtype::from_key, keys, Some(&allowed))?.map(Some))
}

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

/// Parses the `runtime` field (H200 defaults for absent coefficients).
pub fn parse_runtime(value: &Value) -> Result<RuntimeProfile, Error> {
    let map = object(value, "runtime")?;
    known_keys::check(
        map,
        "runtime",
        &[known_keys::RUNTIME, known_keys::RUNTIME_NOTES],
    )?;
    // Each field read on its own (serde's derived reader for the whole
    // struct weighed on the page's bundle); absent fields keep the
    // H200's figures, notes are not read.
    let mut r = RuntimeProfile::default();
    const BYTES: &str = "a whole number of bytes";
    let bytes = |key: &str| field::<u64>(map, "runtime", key, BYTES);
    let set = |slot: &mut u64, key: &str| -> Result<(), Error> {
        if let Some(v) = bytes(key)? {
            *slot = v;
        }
        Ok(())
    };
    set(&mut r.cuda_context_bytes, "cuda_context_bytes")?;
    set(&mut r.cublas_library_bytes, "cublas_library_bytes")?;
    set(&mut r.cublas_workspace_bytes, "cublas_workspace_bytes")?;
    set(&mut r.model_kernels_bytes, "model_kernels_bytes")?;
    set(&mut r.backward_library_bytes, "backward_library_bytes")?;
    set(&mut r.cudnn_library_bytes, "cudnn_library_bytes")?;
    set(&mut r.nccl_communicator_bytes, "nccl_communicator_bytes")?;
    set(&mut r.nccl_peer_bytes, "nccl_peer_bytes")?;
    if let Some(v) = member(map, "gpu_total_bytes") {
        r.gpu_total_bytes = if v.is_null() {
            None
        } else {
            bytes("gpu_total_bytes")?
        };
    }
    if let Some(v) = member(map, "gpu") {
        r.gpu = if v.is_null() {
            None
        } else {
            field::<String>(map, "runtime", "gpu", "a string")?
        };
    }
    if let Some(v) = field::<f64>(
        map,
        "runtime",
        "cudnn_workspace_scale",
        "a number from 0 to 16",
    )? {
        r.cudnn_workspace_scale = v;
    }
    if let Some(v) = field::<bool>(map, "runtime", "process_ran_backward", "true or false")? {
        r.process_ran_backward = v;
    }
    for (key, slot) in [
        ("multiprocessors", &mut r.multiprocessors),
        (
            "threads_per_multiprocessor",
            &mut r.threads_per_multiprocessor,
        ),
    ] {
        if let Some(v) = field::<u32>(map, "runtime", key, "a whole number")? {
            *slot = v;
        }
    }
    if let Some(v) = member(map, "allocator") {
        r.allocator = allocator_setting(v)?;
    }
    Ok(r)
}

/// `runtime.allocator`: `"default"`, `"expandable_segments"` (as
/// `PYTORCH_CUDA_ALLOC_CONF` writes it, `expandable_segments:True`, too)
/// or `{expandable_segments, max_split_size}`.
fn allocator_setting(v: &Value) -> Result<AllocatorConfig, Error> {
    const ALLOWED: &str =
        "\"default\", \"expandable_segments\" or {expandable_segments, max_split_size}";
    match v {
        Value::String(name) => match name.as_str() {
            "default" | "" => Ok(AllocatorConfig::default()),
            "expandable_segments" | "expandable_segments:True" => Ok(AllocatorConfig {
                expandable_segments: true,
                max_split_size: None,
            }),
            other => Err(Error::invalid(
                "runtime.allocator",
                format!("unknown setting `{other}`"),
                ALLOWED,
            )),
        },
        Value::Object(map) => {
            known_keys::check(map, "runtime.allocator", &[known_keys::ALLOCATOR])?;
            let mut config = AllocatorConfig::default();
            if let Some(e) = field::<bool>(
                map,
                "runtime.allocator",
                "expandable_segments",
                "true or false",
            )? {
                config.expandable_segments = e;
            }
            if let Some(v) = member(map, "max_split_size") {
                config.max_split_size = if v.is_null() {
                    None
                } else {
                    field::<u64>(
                        map,
                        "runtime.allocator",
                        "max_split_size",
                        "a whole number of bytes",
                    )?
                };
            }
            Ok(config)
        }
        _ => Err(Error::invalid(
            "runtime.allocator",
            "is neither a setting's name nor an object",
            ALLOWED,
        )),
    }
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

    /// Batch 22 of the generalization set: a checkpointed Gemma-2-9B LoRA
    /// job with the state resident ran after the non-resident one just
    /// before it (a process of its own), not after the build's first
    /// training case, which ran in another.
    #[test]
    fn the_latest_case_without_the_state_resident_made_the_optimizer() {
        let mut history = ProcessHistory::default();
        let mut earlier = |batch: u32, resident: bool| {
            let text = format!(
                r#"{{"case": "x", "model": "gpt2", "weight_bytes": 1000, "workload": {{"mode": "training", "batch": {batch}, "training": {{"optimizer": "adamw", "optimizer_state_resident": {resident}}}}}, "measured": {{"driver_peak": 1}}}}"#
            );
            let value: Value = serde_json::from_str(&text).unwrap();
            let spec = Spec::from_value(&value).unwrap();
            history.earlier_job(&value, &spec).map(|w| w.batch)
        };
        assert_eq!(earlier(2, false), None, "the first makes an optimizer");
        assert_eq!(earlier(4, false), None, "so does the next, elsewhere");
        assert_eq!(earlier(1, true), Some(4), "found where the last left it");
        assert_eq!(earlier(8, true), Some(4));
    }

    /// The workspace's segment is the first inference case's: a third case
    /// of a build replays after the first, not the second (batch 34's
    /// ESM-2 650M b8 L1024 after b16 L512 and b2 L2048: -0.2% after the
    /// second, +0.1% after the first).
    #[test]
    fn an_inference_case_replays_after_its_build_s_first() {
        let mut history = ProcessHistory::default();
        let mut earlier = |batch: u32, resident: u64| {
            let text = format!(
                r#"{{"case": "x", "model": "gpt2", "weight_bytes": 1000, "workload": {{"mode": "inference", "batch": {batch}}}, "runtime": {{"process_ran_backward": false}}, "measured": {{"driver_peak": 1, "resident_before": {resident}}}}}"#
            );
            let value: Value = serde_json::from_str(&text).unwrap();
            let spec = Spec::from_value(&value).unwrap();
            history.earlier_job(&value, &spec).map(|w| w.batch)
        };
        let kept = 1000 + (33 << 20);
        assert_eq!(earlier(16, 1000), None, "a fresh process");
        assert_eq!(earlier(2, kept), Some(16));
        assert_eq!(earlier(8, kept), Some(16), "the first, not the one before");
    }

    /// A file measured with `--one-process` (the cases of
    /// `measurements/shared-process/cases/notebook-a.jsonl`): each case
    /// replays after what its process ran before it, the earlier builds'
    /// first cases and first training cases included, each with its own
    /// model; a file without `process_builds_before` keeps to each build.
    #[test]
    fn a_case_after_other_builds_replays_their_jobs() {
        let mut history = ProcessHistory::default();
        let mut chain = |model: &str, mode: &str, batch: u32, builds: Option<u32>| {
            let runtime = builds.map_or(String::new(), |n| {
                format!(r#", "runtime": {{"process_builds_before": {n}}}"#)
            });
            let text = format!(
                r#"{{"case": "x", "model": "{model}", "weight_bytes": 1000, "workload": {{"mode": "{mode}", "batch": {batch}, "inference": {{"kind": "forward"}}}}{runtime}, "measured": {{"driver_peak": 1}}}}"#
            );
            let value: Value = serde_json::from_str(&text).unwrap();
            let spec = Spec::from_value(&value).unwrap();
            history
                .earlier_jobs(&value, &spec)
                .iter()
                .map(|(arch, w)| (arch.family(), w.batch))
                .collect::<alloc::vec::Vec<_>>()
        };
        assert_eq!(chain("gpt2", "inference", 2, Some(0)), []);
        // The first build's cases follow its own history (a training case
        // without the state resident made the optimizer).
        assert_eq!(chain("gpt2", "training", 8, Some(0)), []);
        assert_eq!(
            chain("bert-base-uncased", "inference", 32, Some(1)),
            [("decoder", 2), ("decoder", 8)]
        );
        assert_eq!(
            chain("resnet-50", "inference", 64, Some(2)),
            [("decoder", 2), ("decoder", 8), ("encoder", 32)]
        );
        assert_eq!(
            chain("resnet-50", "inference", 256, Some(2)),
            [("decoder", 2), ("decoder", 8), ("encoder", 32), ("cnn", 64)]
        );
        // Only the builds the case names: one before this one.
        assert_eq!(chain("vit-b-16", "inference", 64, Some(1)), [("cnn", 64)]);
        // Without the key, a build of its own process.
        assert_eq!(chain("gpt2", "inference", 4, None), []);
    }

    #[test]
    fn process_builds_before_must_be_a_count() {
        for bad in ["-1", "1.5", "\"two\"", "null", "99999999999"] {
            let text = format!(
                r#"{{"model": "gpt2", "workload": {{"mode": "inference"}}, "runtime": {{"process_builds_before": {bad}}}}}"#
            );
            let err = Spec::from_json(&text).unwrap_err().to_string();
            assert!(
                err.contains("runtime.process_builds_before") && err.contains("whole number"),
                "{bad}: {err}"
            );
        }
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
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 0}}"#,
            &["workload.batch", "1 to 65536"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": -3}}"#,
            &["workload.batch", "1 to 65536"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "seq_len": 1e30}}"#,
            &["workload.seq_len"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "seq_len": 99999999999}}"#,
            &["workload.seq_len", "4194304"],
        );
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "dtype": "fp8"}}"#,
            &["workload.dtype", "fp16"],
        );
        check_err(
            r#"{"model": "nope", "workload": {"mode": "inference"}}"#,
            &["unknown preset `nope`", "llama-3.1-8b"],
        );
        check_err(r#"{"model": "llama-3.1-8b""#, &["malformed JSON"]);
        check_err(
            r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "seq_len": NaN}}"#,
            &["malformed JSON"],
        );
        check_err(
            r#"{"workload": {"mode": "inference"}}"#,
            &["`model` is missing"],
        );
        check_err(r#"[1, 2]"#, &["not a JSON object"]);
        check_err(
            r#"{"model": {"family": "decoder", "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 3, "head_dim": 16, "tie_word_embeddings": true, "mlp": "gated", "norm": "rms_norm"}, "workload": {"mode": "inference"}}"#,
            &["model.num_kv_heads", "divisor"],
        );
    }
}
