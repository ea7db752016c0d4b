//! JSON text to a `serde_json::Value`, refusing an object that repeats a
//! key: `serde_json` keeps the last value silently, so
//! `{"seq_len": 512, "seq_len": 4096}` would be estimated at 4,096 tokens
//! whatever the writer meant.

use crate::error::Error;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `text` as JSON; a repeated key in any object is an error naming
/// its path (`workload.seq_len`), as a malformed document is.
pub fn parse(text: &str) -> Result<Value, Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = UniqueKeys {
        path: String::new(),
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| Error::Json {
        message: e.to_string(),
    })?;
    Ok(value)
}

/// A value at `path` (dotted, empty at the top).
struct UniqueKeys {
    path: String,
}

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = format!("{}[{}]", self.path, items.len());
            match seq.next_element_seed(UniqueKeys { path })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "`{path}` is given twice; give each key once"
                )));
            }
            let value = map.next_value_seed(UniqueKeys { path })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_by_path() {
        let e = parse(r#"{"workload": {"seq_len": 512, "seq_len": 4096}}"#).unwrap_err();
        assert!(
            e.to_string().contains("`workload.seq_len` is given twice"),
            "{e}"
        );
        let e = parse(r#"{"a": [{"b": 1, "b": 1}]}"#).unwrap_err();
        assert!(e.to_string().contains("`a[0].b` is given twice"), "{e}");
    }

    #[test]
    fn a_document_parses_as_serde_json_does() {
        for text in [
            r#"{"a": 1, "b": [true, null, -3, 2.5, "x"], "c": {"d": 18446744073709551615}}"#,
            "[]",
            "3",
            r#""s""#,
        ] {
            assert_eq!(
                parse(text).unwrap(),
                serde_json::from_str::<Value>(text).unwrap()
            );
        }
        assert!(parse("{} x").is_err());
        assert!(parse("{").is_err());
    }
}
