//! Import of Hugging Face `config.json` files.

use crate::arch::Architecture;
use crate::error::Error;
use serde_json::Value;

/// Model types the importer understands.
pub const SUPPORTED: &str = "llama, mistral, mixtral, qwen2, gemma2, phi3, gpt2, bert, esm";

/// Imports a `config.json` document.
pub fn import(text: &str) -> Result<Architecture, Error> {
    let value: Value = serde_json::from_str(text).map_err(|e| Error::Json {
        message: alloc::string::ToString::to_string(&e),
    })?;
    import_value(&value)
}

/// Imports a parsed `config.json`.
pub fn import_value(value: &Value) -> Result<Architecture, Error> {
    let model_type = value
        .get("model_type")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::missing("model_type", SUPPORTED))?;
    Err(Error::UnsupportedModelType {
        model_type: model_type.into(),
        supported: SUPPORTED.into(),
    })
}
