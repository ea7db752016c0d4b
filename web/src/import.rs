//! What the page reads from text a user pastes, drops or fetches to
//! describe a job: a Hugging Face config.json as the model, a framework's
//! own arguments (`TrainingArguments`, a `LoraConfig`, ...) as the
//! workload. It runs in the page's second module
//! (`crate::panels::import_config`, `crate::panels::import_framework`),
//! loaded when an import is asked for, so that the page's first load
//! carries no importer; the model and the workload come back as JSON that
//! the page's own spec readers take ([`model_json`], [`read_model_json`],
//! `parse_workload`).

use crate::format;
use crate::intake;
use crate::state::clip_name;
use headroom_core::arch::{Architecture, Model};
use headroom_core::error::Error;
use headroom_core::readers::{framework, parse_model_with, parse_workload};
use headroom_core::workload::Workload;
use serde_json::{Map, Value};

/// A core message about text the user gave, made safe to show.
pub fn message(e: &Error) -> String {
    format::shown(&e.to_string(), 600)
}

/// A config.json's text as a model, named by `hub_id` when it was fetched
/// by that id (its `_name_or_path` is often where its author saved it),
/// else by its `_name_or_path`; or why not, in words for the page.
pub fn model_from_config(source: &str, hub_id: Option<&str>) -> Result<Model, String> {
    intake::check_json_text("the config.json", source, intake::MAX_CONFIG_BYTES)?;
    if let Some(hint) = intake::config_box_hint(source) {
        return Err(hint);
    }
    let value = serde_json::from_str::<Value>(source).map_err(|e| {
        message(&Error::Json {
            message: format!("config.json: {e}"),
        })
    })?;
    let arch = headroom_core::hf_config::import_value(&value).map_err(|e| message(&e))?;
    let name = hub_id
        .or_else(|| value.get("_name_or_path").and_then(Value::as_str))
        .filter(|n| !n.is_empty())
        .map_or_else(|| "imported config.json".into(), clip_name);
    Ok(Model {
        id: "custom".into(),
        name,
        arch,
    })
}

/// A custom model as the spec's `model` object: its architecture's fields
/// and its name.
pub fn model_json(model: &Model) -> Value {
    let mut value = serde_json::to_value(&model.arch).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("name".into(), Value::String(model.name.clone()));
    }
    value
}

/// A spec's `model` as the page reads it: a preset id or an architecture
/// object; a `{"hf_config": ...}` object is refused (the page imports a
/// config.json with [`model_from_config`] first).
pub fn read_model_json(value: Option<&Value>) -> Result<Model, Error> {
    parse_model_with(value, None)
}

/// The frameworks the page offers under "How do you run it?": the core's
/// `workload.framework` names, and what the page calls them.
pub const FRAMEWORKS: &[(&str, &str)] = &[
    ("torch", "a plain PyTorch loop"),
    ("hf_trainer", "Hugging Face Trainer"),
    ("accelerate", "Accelerate"),
    ("lightning", "Lightning"),
    ("timm", "timm's train.py"),
    ("hf_generate", "model.generate()"),
    ("hf_pipeline", "a transformers pipeline"),
    ("sentence_transformers", "sentence-transformers"),
];

/// Most bytes of pasted framework arguments read.
pub const MAX_ARGUMENTS_BYTES: u64 = 1 << 20;

/// The job run by `framework` with the arguments `pasted` (JSON, or
/// nothing for the framework's defaults), at the page's `length` (tokens,
/// or an image's edge for a vision model), as the spec's knobs: the core's
/// framework reader (`headroom_core::readers::framework`) decides every knob
/// the framework decides, and the rest take their defaults.
///
/// `pasted` is one of the framework's own argument dicts (`TrainingArguments`
/// for the `Trainer`, Lightning's or Accelerate's or timm's arguments, a
/// `GenerationConfig`), a peft `LoraConfig` or a `BitsAndBytesConfig`
/// (told apart by their own keys), or an object of the workload's keys for
/// several (`{"training_args": {...}, "lora_config": {...}}`).
pub fn workload_from_framework(
    arch: &Architecture,
    length: u32,
    framework: &str,
    pasted: &str,
) -> Result<Workload, String> {
    let mut workload = Map::new();
    workload.insert("framework".into(), framework.into());
    let length_key = if arch.is_vision() {
        "image_size"
    } else {
        "seq_len"
    };
    workload.insert(length_key.into(), length.into());
    if !pasted.trim().is_empty() {
        intake::check_json_text("the arguments", pasted, MAX_ARGUMENTS_BYTES)?;
        let value: Value = serde_json::from_str(pasted).map_err(|e| {
            message(&Error::Json {
                message: format!("the arguments: {e}"),
            })
        })?;
        let Value::Object(arguments) = value else {
            return Err(
                "the arguments are a JSON object (`{...}`): the framework's `to_dict()`".into(),
            );
        };
        if arguments
            .keys()
            .any(|k| framework::KEYS.contains(&k.as_str()))
        {
            workload.extend(arguments);
        } else {
            let key = arguments_key(framework, &arguments)?;
            workload.insert(key.into(), Value::Object(arguments));
        }
    }
    let (lowered, _) = framework::lower(&Value::Object(workload), arch).map_err(|e| message(&e))?;
    parse_workload(Some(&lowered)).map_err(|e| message(&e))
}

/// The workload key that arguments pasted for `framework` belong under.
fn arguments_key(framework: &str, arguments: &Map<String, Value>) -> Result<&'static str, String> {
    let has = |k: &str| arguments.contains_key(k);
    if has("peft_type") || (has("r") && has("lora_alpha")) {
        return Ok("lora_config");
    }
    if has("quant_method") || has("load_in_4bit") || has("load_in_8bit") {
        return Ok("quantization_config");
    }
    if has("max_new_tokens") || has("num_beams") && !has("per_device_train_batch_size") {
        return Ok("generation_config");
    }
    Ok(match framework {
        "hf_trainer" => "training_args",
        "lightning" => "lightning",
        "accelerate" => "accelerate",
        "timm" => "timm",
        "hf_generate" | "hf_pipeline" => "generation_config",
        _ => {
            return Err(format!(
                "{} takes no arguments of its own here: paste a LoraConfig, a BitsAndBytesConfig or a GenerationConfig, or choose the framework that reads these",
                FRAMEWORKS
                    .iter()
                    .find(|(k, _)| *k == framework)
                    .map_or(framework, |(_, label)| label)
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::presets;

    const LLAMA_CONFIG: &str = r#"{"model_type": "llama", "_name_or_path": "me/my-llama",
        "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "tie_word_embeddings": true, "max_position_embeddings": 131072}"#;

    #[test]
    fn an_imported_config_comes_back_through_the_pages_reader_unchanged() {
        let model = model_from_config(LLAMA_CONFIG, None).unwrap();
        assert_eq!(model.name, "me/my-llama");
        assert_eq!(
            model.arch.params(),
            presets::find("llama-3.2-1b").unwrap().model().arch.params()
        );
        let back = read_model_json(Some(&model_json(&model))).unwrap();
        assert_eq!(back.arch, model.arch);
        assert_eq!(back.name, "me/my-llama");
        let fetched = model_from_config(LLAMA_CONFIG, Some("meta-llama/Llama-3.2-1B")).unwrap();
        assert_eq!(fetched.name, "meta-llama/Llama-3.2-1B");
    }

    #[test]
    fn the_pages_reader_refuses_a_config_it_has_not_imported() {
        let value: Value =
            serde_json::from_str(&format!(r#"{{"hf_config": {LLAMA_CONFIG}}}"#)).unwrap();
        let e = read_model_json(Some(&value)).unwrap_err().to_string();
        assert!(e.contains("import the config.json first"), "{e}");
        // The command line's reader imports it.
        assert!(headroom_core::readers::parse_model(Some(&value)).is_ok());
    }

    /// The spec the command line reads for the same job.
    fn cli_workload(model: &str, workload: &str) -> Workload {
        let spec = format!(r#"{{"model": "{model}", "workload": {workload}}}"#);
        headroom_core::readers::Spec::from_json(&spec)
            .unwrap()
            .workload
    }

    #[test]
    fn pasted_framework_arguments_are_the_command_lines_job() {
        let llama = presets::find("llama-3.2-1b").unwrap().model().arch;
        let args = r#"{"per_device_train_batch_size": 4, "bf16": true, "gradient_checkpointing": true, "output_dir": "out"}"#;
        let w = workload_from_framework(&llama, 1024, "hf_trainer", args).unwrap();
        assert_eq!(w.batch, 4);
        assert!(w.training.grad_checkpointing);
        assert_eq!(
            w,
            cli_workload(
                "llama-3.2-1b",
                &format!(
                    r#"{{"framework": "hf_trainer", "seq_len": 1024, "training_args": {args}}}"#
                )
            )
        );
        // A LoraConfig is told by its keys; its string `target_modules` read as peft does.
        let lora =
            r#"{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": "all-linear"}"#;
        let w = workload_from_framework(&llama, 1024, "hf_trainer", lora).unwrap();
        assert_eq!(w.training.lora.as_ref().map(|l| l.rank), Some(8));
        // Several at once, under the workload's keys.
        let both = format!(r#"{{"training_args": {args}, "lora_config": {lora}}}"#);
        let w = workload_from_framework(&llama, 1024, "hf_trainer", &both).unwrap();
        assert_eq!((w.batch, w.training.lora.map(|l| l.rank)), (4, Some(8)));
        // QLoRA: a BitsAndBytesConfig beside them, told by its own keys.
        let bnb = r#"{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16"}"#;
        let qlora = format!(
            r#"{{"training_args": {args}, "lora_config": {lora}, "quantization_config": {bnb}}}"#
        );
        let w = workload_from_framework(&llama, 1024, "hf_trainer", &qlora).unwrap();
        assert_eq!(
            w,
            cli_workload(
                "llama-3.2-1b",
                &format!(
                    r#"{{"framework": "hf_trainer", "seq_len": 1024, "training_args": {args}, "lora_config": {lora}, "quantization_config": {bnb}}}"#
                )
            )
        );
        assert_eq!(
            w.dtype,
            headroom_core::arch::Dtype::Int4,
            "nf4 without double quantization"
        );
        // Nothing pasted: the framework's defaults.
        let w = workload_from_framework(&llama, 2048, "hf_generate", "").unwrap();
        assert_eq!(
            w,
            cli_workload(
                "llama-3.2-1b",
                r#"{"framework": "hf_generate", "seq_len": 2048}"#
            )
        );
    }

    #[test]
    fn framework_arguments_it_does_not_know_are_refused_by_name() {
        let llama = presets::find("llama-3.2-1b").unwrap().model().arch;
        let e = workload_from_framework(&llama, 1024, "hf_trainer", r#"{"per_device_batch": 4}"#)
            .unwrap_err();
        assert!(e.contains("per_device_batch"), "{e}");
        let e = workload_from_framework(&llama, 1024, "torch", r#"{"lr": 1}"#).unwrap_err();
        assert!(e.contains("a plain PyTorch loop takes no arguments"), "{e}");
        let e = workload_from_framework(&llama, 1024, "hf_trainer", "[1]").unwrap_err();
        assert!(e.contains("JSON object"), "{e}");
    }

    #[test]
    fn what_is_not_a_config_says_what_the_box_wants() {
        let e = model_from_config("Qwen/Qwen2.5-7B-Instruct", None).unwrap_err();
        assert!(e.contains("Hub id"), "{e}");
        let e = model_from_config("{\"model_type\": \"no-such-type\"}", None).unwrap_err();
        assert!(e.contains("no-such-type"), "{e}");
        let e = model_from_config("{\"model_type\": ", None).unwrap_err();
        assert!(e.contains("malformed JSON"), "{e}");
    }
}
