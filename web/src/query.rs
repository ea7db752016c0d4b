//! Query strings: percent-coding, and JSON values as readable dotted keys.
//!
//! `{"training": {"optimizer": "sgd", "lora": {"rank": 8}}}` becomes
//! `training.optimizer=sgd&training.lora.rank=8`; arrays become comma lists
//! (`blocks=3,4,6,3`, a one-element list keeps a trailing comma).

use serde_json::{Map, Number, Value};

/// Percent-encodes a query key or value, leaving `A-Z a-z 0-9 - . _ ~ ,`
/// readable.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~,".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes and `+` (as a space). Bad escapes are kept as
/// written; invalid UTF-8 is replaced.
pub fn decode(s: &str) -> String {
    String::from_utf8_lossy(&decode_bytes(s)).into_owned()
}

/// Decodes like [`decode`], but `None` where the escapes spell bytes that
/// are not UTF-8 text (`%FF%FE`).
pub fn decode_utf8(s: &str) -> Option<String> {
    String::from_utf8(decode_bytes(s)).ok()
}

fn decode_bytes(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = core::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// The `key=value` parts of `?a=1&b=2` (leading `?` or `#` optional), as
/// written (not decoded), in order; empty parts are skipped.
pub fn split(query: &str) -> impl Iterator<Item = &str> {
    query
        .trim_start_matches(['?', '#'])
        .split('&')
        .filter(|p| !p.is_empty())
}

/// Splits `?a=1&b=2` (leading `?` or `#` optional) into decoded pairs, in order.
pub fn parse(query: &str) -> Vec<(String, String)> {
    split(query)
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// Joins pairs into `a=1&b=2` (no leading `?`).
pub fn join(pairs: &[(String, String)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Flattens a JSON value into `(dotted.key, text)` leaves.
pub fn flatten(prefix: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Object(_) => out.push((prefix.to_string(), "{}".into())),
        Value::Array(items) => {
            let mut text = items.iter().map(scalar_text).collect::<Vec<_>>().join(",");
            if items.len() <= 1 {
                text.push(',');
            }
            out.push((prefix.to_string(), text));
        }
        v => out.push((prefix.to_string(), scalar_text(v))),
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads a leaf written by [`flatten`] back into a JSON value: `null`,
/// `true`/`false`, numbers, comma lists, `{}`, else a string.
pub fn leaf(text: &str) -> Value {
    if text == "," {
        return Value::Array(Vec::new());
    }
    if text.contains(',') {
        let mut parts: Vec<&str> = text.split(',').collect();
        if parts.last() == Some(&"") {
            parts.pop();
        }
        return Value::Array(parts.into_iter().map(scalar).collect());
    }
    if text == "{}" {
        return Value::Object(Map::new());
    }
    scalar(text)
}

fn scalar(text: &str) -> Value {
    match text {
        "null" => Value::Null,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        t => {
            if let Ok(n) = t.parse::<u64>() {
                Value::Number(n.into())
            } else if let Ok(n) = t.parse::<i64>() {
                Value::Number(n.into())
            } else if let Some(n) = t
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && t.bytes().any(|b| b.is_ascii_digit()))
                .and_then(Number::from_f64)
            {
                Value::Number(n)
            } else {
                Value::String(t.to_string())
            }
        }
    }
}

/// Sets `path` (dotted) inside `root` to `value`, turning whatever is in the
/// way into objects.
pub fn set_path(root: &mut Value, path: &str, value: Value) {
    let mut node = root;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let map = node.as_object_mut().expect("made an object above");
        if parts.peek().is_none() {
            map.insert(part.to_string(), value);
            return;
        }
        node = map.entry(part.to_string()).or_insert(Value::Null);
    }
}

/// Builds a value from flattened leaves.
pub fn unflatten<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Value {
    let mut root = Value::Object(Map::new());
    for (k, v) in pairs {
        set_path(&mut root, k, leaf(v));
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percent_coding_round_trips_and_keeps_readable_characters() {
        for s in ["llama-3.1-8b", "a b&c=d%", "q_proj,v_proj", "ünï", "100%"] {
            assert_eq!(decode(&encode(s)), s);
        }
        assert_eq!(encode("training.lora.rank"), "training.lora.rank");
        assert_eq!(decode("a%2"), "a%2");
        assert_eq!(decode("%zz"), "%zz");
        assert_eq!(decode("%"), "%");
        assert_eq!(decode_utf8("%E2%9C%93"), Some("✓".into()));
        assert_eq!(decode_utf8("%ZZ%"), Some("%ZZ%".into()));
        assert_eq!(decode_utf8("%FF%FE"), None);
        assert_eq!(decode("%FF%FE"), "\u{fffd}\u{fffd}");
    }

    #[test]
    fn parse_splits_pairs() {
        let p = parse("?model=gpt2&batch=4&&flag");
        assert_eq!(
            p,
            vec![
                ("model".into(), "gpt2".into()),
                ("batch".into(), "4".into()),
                ("flag".into(), String::new())
            ]
        );
    }

    #[test]
    fn flatten_then_unflatten_is_identity() {
        let v = json!({
            "a": 1, "b": {"c": true, "d": null, "e": "x"},
            "list": [3, 4, 6, 3], "one": ["q_proj"], "none": [], "f": 0.5, "neg": -2
        });
        let mut leaves = Vec::new();
        flatten("", &v, &mut leaves);
        let back = unflatten(leaves.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(back, v);
    }

    #[test]
    fn set_path_replaces_null_with_objects() {
        let mut v = json!({"training": {"lora": null}});
        set_path(&mut v, "training.lora.rank", json!(8));
        assert_eq!(v, json!({"training": {"lora": {"rank": 8}}}));
    }
}
