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
use crate::presets;
use crate::runtime::RuntimeProfile;
use crate::workload::Workload;
pub mod framework;
pub mod json;
pub mod known_keys;
mod measured;
mod runtime;
mod workload;

use alloc::format;
use alloc::string::{String, ToString};
pub use measured::ProcessHistory;
#[cfg(feature = "diagnostics")]
pub use measured::{allocator_limit_of, estimate_as_measured};
use measured::{infer_backward_history, infer_resident_optimizer_state};
pub use runtime::parse_runtime;
use serde_json::{Map, Value};
pub use workload::parse_workload;

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

/// Reads a Hugging Face `config.json` as an architecture
/// ([`crate::hf_config::import_value`]), for [`parse_model_with`].
pub type HfConfigImport = fn(&Value) -> Result<crate::arch::Architecture, Error>;

/// Parses the `model` field.
pub fn parse_model(value: Option<&Value>) -> Result<Model, Error> {
    parse_model_with(value, Some(crate::hf_config::import_value))
}

/// Parses the `model` field, reading `{"hf_config": {...}}` with
/// `hf_config` (without one, such a model is refused): a program that
/// imports config.json files elsewhere (the page, whose importer loads
/// with its second module) leaves the importer out of the code that
/// parses its jobs.
pub fn parse_model_with(
    value: Option<&Value>,
    hf_config: Option<HfConfigImport>,
) -> Result<Model, Error> {
    const ALLOWED: &str = ALLOWED_MODEL;
    match value {
        None | Some(Value::Null) => Err(Error::missing("model", ALLOWED)),
        Some(Value::String(id)) => Ok(presets::find(id)?.model()),
        Some(Value::Object(map)) => {
            if let Some(config) = member(map, "hf_config") {
                known_keys::check(map, "model", &[known_keys::HF_MODEL])?;
                let import = hf_config.ok_or_else(|| {
                    Error::unsupported(
                        "`model.hf_config` here: import the config.json first and give its architecture",
                    )
                })?;
                let arch = import(config)?;
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
            let message = clean_serde_message(&e.to_string());
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

/// A serde message without the " at line 0 column 0" serde_json appends
/// for values (a position that means nothing there).
pub(crate) fn clean_serde_message(message: &str) -> String {
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
