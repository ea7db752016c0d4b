//! The shape of a profile document: which keys each object may hold, so
//! that no key or free text travels unvetted. Scalars' types and ranges are
//! the parsers' business.

use super::points::{POINT_KEYS, POINT_MEASURED_KEYS, POINT_PREDICTION_KEYS, POINT_RUNTIME_KEYS};
use super::{field_err, printable, runtime_keys, ProfileError, Summary, COEFFICIENTS};
use crate::readers::known_keys;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::Value;

/// Refuses any key the profile's shape does not list.
pub(crate) fn check_profile_shape(value: &Value) -> Result<(), ProfileError> {
    check_shape(value, "", PROFILE_SHAPE)
}

/// Keys of the profile document.
pub const PROFILE_KEYS: [&str; 14] = [
    "schema_version",
    "name",
    "created",
    "collector_version",
    "gpu",
    "driver",
    "cuda",
    "torch",
    "transformers",
    "runtime",
    "coefficients",
    "fit",
    "summary",
    "points",
];
/// Keys of `gpu`.
pub const GPU_KEYS: [&str; 3] = ["name", "total_bytes", "compute_capability"];
/// Keys of each `coefficients.X`.
pub const COEFFICIENT_KEYS: [&str; 4] = ["value", "uncertainty", "source", "cases"];
/// Keys of `fit`.
pub const FIT_KEYS: [&str; 4] = [
    "basis",
    "points_used",
    "points_skipped",
    "residual_std_bytes",
];
/// Longest note (`loss`, `zero_grad`, `wrap`, `init`, LoRA module names).
pub const MAX_NOTE_CHARS: usize = 64;

/// What one place of a profile may hold. Objects list their keys; anything
/// else is refused, so no key or free text travels unvetted. Scalars' types
/// and ranges are the parsers' business.
#[derive(Clone, Copy)]
enum Shape {
    /// `null`, a boolean, a number or a string.
    Scalar,
    /// `null` or a name of at most [`MAX_NOTE_CHARS`] letters, digits, `_`,
    /// `-` and `.`: the measurement format's notes, which no parser reads.
    Name,
    /// A list of one shape.
    List(&'static Shape),
    /// A scalar or an object with these keys; keys not in the second list
    /// hold scalars.
    Object(&'static [&'static str], &'static [(&'static str, Shape)]),
    /// An object with these keys, every value of one shape.
    Each(&'static [&'static str], &'static Shape),
    /// An object with the keys a function gives (the core's own types, so a
    /// field the core adds is accepted without a change here).
    Keys(fn() -> Vec<String>, &'static [(&'static str, Shape)]),
}

/// The keys a spec accepts at each place of a point's `workload` and at
/// `runtime.allocator`: the core's own lists (`headroom_core::readers::
/// known_keys`), so a field the core adds is accepted here too; the
/// measurement format's notes are names (see [`Shape::Name`]).
fn keys_of(lists: &[&[&str]]) -> Vec<String> {
    lists
        .iter()
        .flat_map(|l| l.iter().map(|k| k.to_string()))
        .collect()
}
fn allocator_keys() -> Vec<String> {
    keys_of(&[known_keys::ALLOCATOR])
}
fn workload_keys() -> Vec<String> {
    keys_of(&[known_keys::WORKLOAD, known_keys::WORKLOAD_NOTES])
}
fn inference_keys() -> Vec<String> {
    keys_of(&[known_keys::INFERENCE])
}
fn training_keys() -> Vec<String> {
    keys_of(&[known_keys::TRAINING, known_keys::TRAINING_NOTES])
}
fn lora_keys() -> Vec<String> {
    keys_of(&[known_keys::LORA])
}
fn parallel_keys() -> Vec<String> {
    keys_of(&[known_keys::PARALLEL, known_keys::PARALLEL_NOTES])
}
fn esmfold_keys() -> Vec<String> {
    keys_of(&[known_keys::ESMFOLD])
}

const ALLOCATOR: (&str, Shape) = ("allocator", Shape::Keys(allocator_keys, &[]));
const COEFFICIENT_SHAPE: Shape =
    Shape::Object(&COEFFICIENT_KEYS, &[("cases", Shape::List(&Shape::Scalar))]);
const SUMMARY_SHAPE: Shape = Shape::Keys(summary_keys, &[]);
const WORKLOAD_SHAPE: Shape = Shape::Keys(
    workload_keys,
    &[
        ("loss", Shape::Name),
        ("inference", Shape::Keys(inference_keys, &[])),
        (
            "training",
            Shape::Keys(
                training_keys,
                &[
                    ("zero_grad", Shape::Name),
                    (
                        "lora",
                        Shape::Keys(lora_keys, &[("target_modules", Shape::List(&Shape::Name))]),
                    ),
                ],
            ),
        ),
        (
            "parallel",
            Shape::Keys(
                parallel_keys,
                &[("wrap", Shape::Name), ("init", Shape::Name)],
            ),
        ),
        ("esmfold", Shape::Keys(esmfold_keys, &[])),
    ],
);
const POINT_SHAPE: Shape = Shape::Object(
    &POINT_KEYS,
    &[
        ("workload", WORKLOAD_SHAPE),
        ("runtime", Shape::Object(&POINT_RUNTIME_KEYS, &[ALLOCATOR])),
        (
            "measured",
            Shape::Object(
                &POINT_MEASURED_KEYS,
                &[("status", Shape::Name), ("peak_window", Shape::Name)],
            ),
        ),
        ("prediction", Shape::Object(&POINT_PREDICTION_KEYS, &[])),
    ],
);
const PROFILE_SHAPE: Shape = Shape::Object(
    &PROFILE_KEYS,
    &[
        ("gpu", Shape::Object(&GPU_KEYS, &[])),
        ("runtime", Shape::Keys(runtime_keys, &[ALLOCATOR])),
        (
            "coefficients",
            Shape::Each(&COEFFICIENTS, &COEFFICIENT_SHAPE),
        ),
        ("fit", Shape::Object(&FIT_KEYS, &[])),
        ("summary", Shape::Each(&["before", "after"], &SUMMARY_SHAPE)),
        ("points", Shape::List(&POINT_SHAPE)),
    ],
);

/// The fields of an error summary, as `fit` writes them.
fn summary_keys() -> Vec<String> {
    match serde_json::to_value(Summary::of(&[])) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `at.key`, or `key` at the top.
pub(crate) fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_string()
    } else {
        format!("{at}.{key}")
    }
}

fn unknown_key<'a>(at: &str, key: &str, allowed: impl Iterator<Item = &'a str>) -> ProfileError {
    field_err(
        &join(at, &printable(key, 80)),
        "unknown field",
        &allowed.collect::<Vec<_>>().join(", "),
    )
}

/// Refuses any key the shape does not list, and objects or lists where a
/// plain value belongs.
fn check_shape(v: &Value, at: &str, shape: Shape) -> Result<(), ProfileError> {
    let field = if at.is_empty() { "(document)" } else { at };
    let describe = |shape: Shape| match shape {
        Shape::Scalar => "a number, string, true, false or null".to_string(),
        Shape::Name => {
            format!("null or a name of 1 to {MAX_NOTE_CHARS} letters, digits, `_`, `-` and `.`")
        }
        Shape::List(_) => "a list".to_string(),
        Shape::Object(..) | Shape::Each(..) | Shape::Keys(..) => "an object".to_string(),
    };
    let object = |map: &serde_json::Map<String, Value>,
                  keys: &[&str],
                  of: &dyn Fn(&str) -> Shape|
     -> Result<(), ProfileError> {
        for (key, item) in map {
            if !keys.contains(&key.as_str()) {
                return Err(unknown_key(at, key, keys.iter().copied()));
            }
            check_shape(item, &join(at, key), of(key))?;
        }
        Ok(())
    };
    let nested = |inner: &'static [(&'static str, Shape)]| {
        move |key: &str| {
            inner
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(Shape::Scalar, |(_, s)| *s)
        }
    };
    match (shape, v) {
        (Shape::List(item), Value::Array(items)) => {
            for (i, x) in items.iter().enumerate() {
                check_shape(x, &format!("{at}[{i}]"), *item)?;
            }
            Ok(())
        }
        (Shape::Object(keys, inner), Value::Object(map)) => object(map, keys, &nested(inner)),
        (Shape::Each(keys, each), Value::Object(map)) => object(map, keys, &|_| *each),
        (Shape::Keys(keys, inner), Value::Object(map)) => {
            let owned = keys();
            let keys: Vec<&str> = owned.iter().map(String::as_str).collect();
            object(map, &keys, &nested(inner))
        }
        (Shape::Name, Value::String(s)) => {
            let ok = !s.is_empty()
                && s.chars().count() <= MAX_NOTE_CHARS
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
            if ok {
                Ok(())
            } else {
                Err(field_err(
                    field,
                    format!("`{}` is not a name", printable(s, 80)),
                    &describe(shape),
                ))
            }
        }
        (Shape::Name, Value::Null) => Ok(()),
        (Shape::Name, _) => Err(field_err(field, "is not a name", &describe(shape))),
        (_, Value::Array(_)) => Err(field_err(field, "is a list", &describe(shape))),
        (_, Value::Object(_)) => Err(field_err(field, "is an object", &describe(shape))),
        // Scalars: their types and ranges are checked by the parsers.
        _ => Ok(()),
    }
}

pub(crate) fn only_keys(field: &str, v: &Value, allowed: &[&str]) -> Result<(), ProfileError> {
    let obj = v.as_object().ok_or_else(|| {
        field_err(
            field,
            "is not an object",
            &format!("an object with {}", allowed.join(", ")),
        )
    })?;
    for key in obj.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(unknown_key(field, key, allowed.iter().copied()));
        }
    }
    Ok(())
}
