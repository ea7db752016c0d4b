//! What the page reads from text a user pastes, drops or fetches to
//! describe a job: a Hugging Face config.json as the model. It runs in the
//! page's second module (`crate::panels::import_config`), loaded when an
//! import is asked for, so that the page's first load carries no importer;
//! the model comes back as the JSON of its architecture, which the page's
//! own spec reader takes ([`model_json`], [`read_model_json`]).

use crate::format;
use crate::intake;
use crate::state::clip_name;
use headroom_core::arch::Model;
use headroom_core::error::Error;
use headroom_core::spec::parse_model_with;
use serde_json::Value;

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
        assert!(headroom_core::spec::parse_model(Some(&value)).is_ok());
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
