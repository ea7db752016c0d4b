//! The calibration profile: what `fit` writes, `upload` sends, `check
//! --profile` applies and the page bundles from `calibration/profiles/`.
//!
//! Reading is strict: files over [`MAX_PROFILE_BYTES`], unknown keys at any
//! level, out-of-range numbers, oversized or control-character strings, and
//! keys or values that look like file paths, home directories, e-mail
//! addresses or `user@host`, or hold the local host or user name, are
//! rejected with a message naming the field. The page reads the same file
//! through `name`, `runtime` and `points`.

use crate::cases::{classify, Classified, Origin, Record, Status};
use crate::error::CollectorError;
use crate::stats::Summary;
use headroom_core::spec::known_keys;
use headroom_core::RuntimeProfile;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The schema this collector writes and accepts.
pub const SCHEMA_VERSION: u32 = 1;
/// Largest profile file accepted.
pub const MAX_PROFILE_BYTES: usize = 16 << 20;
/// Most points in a profile.
pub const MAX_POINTS: usize = 10_000;
/// Largest byte coefficient accepted (16 GiB).
pub const MAX_COEFFICIENT_BYTES: u64 = 16 << 30;

/// The runtime coefficients, by their `RuntimeProfile` field names.
pub const COEFFICIENTS: [&str; 8] = [
    "cuda_context_bytes",
    "cublas_library_bytes",
    "cublas_workspace_bytes",
    "model_kernels_bytes",
    "backward_library_bytes",
    "cudnn_library_bytes",
    "nccl_communicator_bytes",
    "nccl_peer_bytes",
];

/// A calibration profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Name to show, e.g. `NVIDIA H200, torch 2.11.0+cu130, driver 580.159.04`.
    pub name: String,
    /// When it was fitted (RFC 3339, UTC).
    pub created: String,
    /// Collector version that fitted it.
    pub collector_version: String,
    /// The card.
    pub gpu: GpuFacts,
    /// NVIDIA driver version.
    pub driver: Option<String>,
    /// CUDA version of the PyTorch build.
    pub cuda: Option<String>,
    /// PyTorch version.
    pub torch: Option<String>,
    /// transformers version.
    pub transformers: Option<String>,
    /// The fitted runtime, usable as a spec's `runtime` as is.
    pub runtime: RuntimeProfile,
    /// Each coefficient with its uncertainty and where it came from.
    pub coefficients: BTreeMap<String, Coefficient>,
    /// How the fit was made.
    pub fit: FitInfo,
    /// Error summaries of the points before and after the fit.
    pub summary: SummaryPair,
    /// The measured points (measurement cases with `prediction`).
    pub points: Vec<Value>,
}

/// The card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuFacts {
    /// Name as the driver reports it.
    pub name: String,
    /// Device memory, bytes.
    pub total_bytes: u64,
    /// Compute capability, e.g. `9.0`.
    pub compute_capability: Option<String>,
}

/// One fitted coefficient.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coefficient {
    /// Bytes (equal to the `runtime` field of the same name).
    pub value: u64,
    /// One standard error, bytes.
    pub uncertainty: u64,
    /// The measurement it came from.
    pub source: String,
    /// Cases it was fitted on (empty for probe or default figures).
    pub cases: Vec<String>,
}

/// How the fit was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitInfo {
    /// `predicted_reserved` (measured driver peak minus the core's predicted
    /// reserved peak) or `torch_reserved` (minus torch's measured reserved peak).
    pub basis: String,
    /// Points in the fit.
    pub points_used: usize,
    /// Points left out (not modelled, OOM, failed).
    pub points_skipped: usize,
    /// Standard deviation of the residuals, bytes.
    pub residual_std_bytes: u64,
}

/// Error summaries before and after the fit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryPair {
    /// With the runtime the points were predicted with before.
    pub before: Summary,
    /// With the fitted runtime.
    pub after: Summary,
}

/// Why a profile was rejected.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfileError {
    /// Larger than [`MAX_PROFILE_BYTES`].
    #[error("the profile is {0} bytes; allowed: at most {MAX_PROFILE_BYTES} bytes")]
    TooLarge(usize),
    /// Not JSON.
    #[error("malformed JSON: {0}")]
    Json(String),
    /// A field is wrong.
    #[error("`{field}`: {problem}; allowed: {allowed}")]
    Field {
        /// Dotted path, e.g. `coefficients.cuda_context_bytes.value`.
        field: String,
        /// What is wrong.
        problem: String,
        /// What the field accepts.
        allowed: String,
    },
}

fn field_err(field: &str, problem: impl Into<String>, allowed: &str) -> ProfileError {
    ProfileError::Field {
        field: field.into(),
        problem: problem.into(),
        allowed: allowed.into(),
    }
}

/// Who runs the collector: strings a payload must not contain.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    /// Host name.
    pub host: Option<String>,
    /// User name.
    pub user: Option<String>,
}

impl Identity {
    /// This machine's host name and this user's name.
    pub fn local() -> Identity {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .or_else(|| {
                std::env::var("HOME")
                    .ok()
                    .and_then(|h| h.rsplit('/').next().map(str::to_string))
            })
            .filter(|s| !s.is_empty());
        Identity { host, user }
    }
}

/// Parses and validates a profile document.
pub fn parse(text: &str, identity: &Identity) -> Result<Profile, ProfileError> {
    if text.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::TooLarge(text.len()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| ProfileError::Json(e.to_string()))?;
    from_value(&value, identity)
}

/// Reads a profile file's text (`-`: standard input), refusing more than
/// [`MAX_PROFILE_BYTES`]: a regular file by its size, before reading; a pipe,
/// a device or standard input by reading at most one byte over the limit, so
/// neither a huge file nor `/dev/urandom` is read into memory.
pub fn read_text(path: &str) -> Result<String, CollectorError> {
    crate::cases::read_limited(path, MAX_PROFILE_BYTES as u64, "a profile")
}

/// Validates a profile given as a JSON value.
pub fn from_value(value: &Value, identity: &Identity) -> Result<Profile, ProfileError> {
    if !value.is_object() {
        return Err(field_err(
            "(document)",
            "is not a JSON object",
            "a calibration profile object",
        ));
    }
    // Before serde: unknown keys at every level, including those the core's
    // lenient parsers (runtime, workload) would skip.
    check_shape(value, "", PROFILE_SHAPE)?;
    let profile: Profile = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = clean(&e.into_inner().to_string());
        // serde names an unknown field in its message, not in the path.
        if let Some(rest) = inner.strip_prefix("unknown field `") {
            let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
            let field = if path == "." {
                name.to_string()
            } else if path == name || path.ends_with(&format!(".{name}")) {
                path.clone()
            } else {
                format!("{path}.{name}")
            };
            let allowed = expected
                .trim_start_matches(", expected ")
                .trim_start_matches("one of ")
                .replace('`', "");
            return field_err(&field, "unknown field", &allowed);
        }
        field_err(
            if path == "." { "(document)" } else { &path },
            inner,
            "see calibration-collector/README.md, \"Calibration profile\"",
        )
    })?;
    validate(&profile)?;
    scan_strings(value, "", identity)?;
    Ok(profile)
}

/// The fields of the core's runtime profile, as it serialises them (so a
/// field the core adds is accepted without a change here).
pub fn runtime_keys() -> Vec<String> {
    match serde_json::to_value(RuntimeProfile::h200()) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

fn clean(message: &str) -> String {
    message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_string()
}

fn check_text(field: &str, s: &str, max: usize) -> Result<(), ProfileError> {
    let allowed = format!("text of 1 to {max} characters without control characters");
    if s.trim().is_empty() {
        return Err(field_err(field, "is empty", &allowed));
    }
    if s.chars().count() > max {
        return Err(field_err(
            field,
            format!("is {} characters long", s.chars().count()),
            &allowed,
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(field_err(field, "contains a control character", &allowed));
    }
    Ok(())
}

fn check_version(field: &str, s: &Option<String>) -> Result<(), ProfileError> {
    if let Some(s) = s {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c));
        if !ok {
            return Err(field_err(
                field,
                format!(
                    "`{}` is not a version",
                    s.chars().take(80).collect::<String>()
                ),
                "null or up to 64 characters of letters, digits and . + - _",
            ));
        }
    }
    Ok(())
}

fn check_bytes(field: &str, v: u64, min: u64, max: u64) -> Result<(), ProfileError> {
    if v < min || v > max {
        return Err(field_err(
            field,
            format!("{v} is out of range"),
            &format!("a whole number of bytes from {min} to {max}"),
        ));
    }
    Ok(())
}

/// The byte coefficient `name` of a runtime.
pub fn runtime_field(rt: &RuntimeProfile, name: &str) -> Option<u64> {
    Some(match name {
        "cuda_context_bytes" => rt.cuda_context_bytes,
        "cublas_library_bytes" => rt.cublas_library_bytes,
        "cublas_workspace_bytes" => rt.cublas_workspace_bytes,
        "model_kernels_bytes" => rt.model_kernels_bytes,
        "backward_library_bytes" => rt.backward_library_bytes,
        "cudnn_library_bytes" => rt.cudnn_library_bytes,
        "nccl_communicator_bytes" => rt.nccl_communicator_bytes,
        "nccl_peer_bytes" => rt.nccl_peer_bytes,
        _ => return None,
    })
}

/// Range checks across fields.
pub fn validate(p: &Profile) -> Result<(), ProfileError> {
    if p.schema_version != SCHEMA_VERSION {
        return Err(field_err(
            "schema_version",
            format!("{} is not supported", p.schema_version),
            &SCHEMA_VERSION.to_string(),
        ));
    }
    check_text("name", &p.name, 200)?;
    if chrono::DateTime::parse_from_rfc3339(&p.created).is_err() {
        return Err(field_err(
            "created",
            format!(
                "`{}` is not a date",
                p.created.chars().take(60).collect::<String>()
            ),
            "an RFC 3339 time, e.g. 2026-11-30T05:00:00Z",
        ));
    }
    check_version("collector_version", &Some(p.collector_version.clone()))?;
    check_text("gpu.name", &p.gpu.name, 128)?;
    check_bytes("gpu.total_bytes", p.gpu.total_bytes, 1 << 30, 1 << 44)?;
    if let Some(cc) = &p.gpu.compute_capability {
        let ok = cc.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty()
                && a.len() <= 2
                && !b.is_empty()
                && b.len() <= 2
                && (a.to_owned() + b).bytes().all(|c| c.is_ascii_digit())
        });
        if !ok {
            return Err(field_err(
                "gpu.compute_capability",
                format!("`{cc}` is not a compute capability"),
                "null or MAJOR.MINOR, e.g. 9.0",
            ));
        }
    }
    check_version("driver", &p.driver)?;
    check_version("cuda", &p.cuda)?;
    check_version("torch", &p.torch)?;
    check_version("transformers", &p.transformers)?;
    if let Some(g) = &p.runtime.gpu {
        check_text("runtime.gpu", g, 128)?;
    }
    if let Some(t) = p.runtime.gpu_total_bytes {
        check_bytes("runtime.gpu_total_bytes", t, 1 << 30, 1 << 44)?;
    }
    let mut outside = 0u64;
    for name in COEFFICIENTS {
        let v = runtime_field(&p.runtime, name).expect("known");
        let min = if name == "cuda_context_bytes" {
            1 << 20
        } else {
            0
        };
        check_bytes(&format!("runtime.{name}"), v, min, MAX_COEFFICIENT_BYTES)?;
        outside += v;
    }
    if outside >= p.gpu.total_bytes {
        return Err(field_err(
            "runtime",
            "the coefficients add up to more than the GPU's memory",
            "coefficients that sum to less than gpu.total_bytes",
        ));
    }
    if !p.coefficients.contains_key("cuda_context_bytes") {
        return Err(field_err(
            "coefficients.cuda_context_bytes",
            "is missing",
            "an object {value, uncertainty, source, cases}",
        ));
    }
    for (name, c) in &p.coefficients {
        let field = format!("coefficients.{name}");
        let Some(rt) = runtime_field(&p.runtime, name) else {
            return Err(field_err(
                &field,
                "unknown coefficient",
                &COEFFICIENTS.join(", "),
            ));
        };
        if c.value != rt {
            return Err(field_err(
                &format!("{field}.value"),
                format!("{} differs from runtime.{name} ({rt})", c.value),
                &format!("the value of runtime.{name}"),
            ));
        }
        check_bytes(
            &format!("{field}.uncertainty"),
            c.uncertainty,
            0,
            MAX_COEFFICIENT_BYTES,
        )?;
        check_text(&format!("{field}.source"), &c.source, 400)?;
        if c.cases.len() > MAX_POINTS {
            return Err(field_err(
                &format!("{field}.cases"),
                format!("has {} entries", c.cases.len()),
                &format!("at most {MAX_POINTS} case names"),
            ));
        }
        for (i, case) in c.cases.iter().enumerate() {
            check_text(&format!("{field}.cases[{i}]"), case, 200)?;
        }
    }
    check_text("fit.basis", &p.fit.basis, 40)?;
    if !["predicted_reserved", "torch_reserved"].contains(&p.fit.basis.as_str()) {
        return Err(field_err(
            "fit.basis",
            format!("`{}` is unknown", p.fit.basis),
            "\"predicted_reserved\" or \"torch_reserved\"",
        ));
    }
    for (label, s) in [
        ("summary.before", &p.summary.before),
        ("summary.after", &p.summary.after),
    ] {
        for (k, v) in [
            ("median_abs_err", s.median_abs_err),
            ("p90_abs_err", s.p90_abs_err),
            ("max_abs_err", s.max_abs_err),
        ] {
            if !v.is_finite() || !(0.0..=100.0).contains(&v) {
                return Err(field_err(
                    &format!("{label}.{k}"),
                    format!("{v} is out of range"),
                    "a fraction from 0 to 100",
                ));
            }
        }
    }
    if p.points.len() > MAX_POINTS {
        return Err(field_err(
            "points",
            format!("has {} points", p.points.len()),
            &format!("at most {MAX_POINTS} points"),
        ));
    }
    for (i, point) in p.points.iter().enumerate() {
        validate_point(&format!("points[{i}]"), point, p.gpu.total_bytes)?;
    }
    Ok(())
}

/// Keys a profile point may have.
pub const POINT_KEYS: [&str; 8] = [
    "case",
    "model",
    "params",
    "weight_bytes",
    "workload",
    "runtime",
    "measured",
    "prediction",
];
/// Keys of a point's `runtime`.
pub const POINT_RUNTIME_KEYS: [&str; 7] = [
    "gpu",
    "gpu_total_bytes",
    "driver",
    "torch",
    "cuda",
    "transformers",
    "allocator",
];
/// Keys of a point's `measured`.
pub const POINT_MEASURED_KEYS: [&str; 12] = [
    "driver_peak",
    "process_peak",
    "peak_window",
    "reserved_peak",
    "alloc_peak",
    "resident_before",
    "seconds",
    "status",
    "process_seconds",
    "poll_hz",
    "poll_samples",
    "baseline_used_bytes",
];
/// Keys of a point's `prediction`.
pub const POINT_PREDICTION_KEYS: [&str; 4] = ["before", "after", "error_before", "error_after"];

fn only_keys(field: &str, v: &Value, allowed: &[&str]) -> Result<(), ProfileError> {
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
/// `runtime.allocator`: the core's own lists (`headroom_core::spec::
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
fn join(at: &str, key: &str) -> String {
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

/// `s` safe to print on a terminal: control and invisible formatting
/// characters (escape sequences, bidirectional overrides) written as
/// `\u{1b}`, at most `max` characters.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        if is_unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters (C0, DEL, C1) and the invisible ones that reorder or
/// hide text (bidirectional controls, zero-width characters, BOM).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
            | '\u{061c}')
}

fn validate_point(at: &str, point: &Value, gpu_total: u64) -> Result<(), ProfileError> {
    only_keys(at, point, &POINT_KEYS)?;
    let record = Record {
        origin: Origin {
            file: at.into(),
            line: 0,
        },
        value: point.clone(),
    };
    let case = match classify(&record) {
        Ok(Classified::Case(c)) => c,
        Ok(Classified::Overheads) => {
            return Err(field_err(
                &format!("{at}.case"),
                "is `runtime_overheads`",
                "a measured case",
            ))
        }
        Err(e) => {
            return Err(field_err(
                at,
                e.to_string().replace(&format!("{at}: "), ""),
                "a measurement case",
            ))
        }
    };
    check_text(&format!("{at}.case"), &case.name, 200)?;
    if case.status != Status::Ok {
        return Err(field_err(
            &format!("{at}.measured.status"),
            "is not ok",
            "only finished points (\"ok\") in a profile",
        ));
    }
    let peak = case.driver_peak.unwrap_or(0);
    if peak > gpu_total {
        return Err(field_err(
            &format!("{at}.measured.driver_peak"),
            format!("{peak} exceeds the GPU's {gpu_total} bytes"),
            "bytes up to gpu.total_bytes",
        ));
    }
    match point.get("model") {
        Some(Value::String(id)) => {
            headroom_core::presets::find(id)
                .map_err(|e| field_err(&format!("{at}.model"), e.to_string(), "a preset id"))?;
        }
        Some(_) => {
            return Err(field_err(
                &format!("{at}.model"),
                "is not a preset id",
                "a preset id (string)",
            ))
        }
        None => {
            return Err(field_err(
                &format!("{at}.model"),
                "is missing",
                "a preset id (string)",
            ))
        }
    }
    headroom_core::spec::parse_workload(point.get("workload")).map_err(|e| {
        field_err(
            &format!("{at}.workload"),
            e.to_string(),
            "a workload object",
        )
    })?;
    if let Some(rt) = point.get("runtime") {
        only_keys(&format!("{at}.runtime"), rt, &POINT_RUNTIME_KEYS)?;
        headroom_core::spec::parse_runtime(rt).map_err(|e| {
            field_err(
                &format!("{at}.runtime"),
                e.to_string(),
                "a measurement case's runtime",
            )
        })?;
    }
    let measured = point.get("measured").expect("checked by classify");
    only_keys(&format!("{at}.measured"), measured, &POINT_MEASURED_KEYS)?;
    if let Some(pred) = point.get("prediction") {
        only_keys(&format!("{at}.prediction"), pred, &POINT_PREDICTION_KEYS)?;
        for key in ["before", "after"] {
            if pred.get(key).is_some_and(|v| !v.is_u64()) {
                return Err(field_err(
                    &format!("{at}.prediction.{key}"),
                    "is not a whole number",
                    "bytes",
                ));
            }
        }
        for key in ["error_before", "error_after"] {
            if pred.get(key).is_some_and(|v| {
                !v.as_f64()
                    .is_some_and(|f| f.is_finite() && f.abs() <= 100.0)
            }) {
                return Err(field_err(
                    &format!("{at}.prediction.{key}"),
                    "is not a fraction",
                    "a number from -100 to 100",
                ));
            }
        }
    }
    for key in ["params", "weight_bytes"] {
        if point.get(key).is_some_and(|v| !v.is_u64() && !v.is_null()) {
            return Err(field_err(
                &format!("{at}.{key}"),
                "is not a whole number",
                "null or a non-negative integer",
            ));
        }
    }
    Ok(())
}

/// What makes a string identifying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identifying {
    /// An absolute or relative file path, or a file name.
    Path,
    /// A home directory (`~`, `~alice`, `$HOME`, `%USERPROFILE%`).
    Home,
    /// An e-mail address or `user@host`.
    Email,
}

impl Identifying {
    fn problem(self) -> &'static str {
        match self {
            Identifying::Path => "looks like a file path",
            Identifying::Home => "names a home directory",
            Identifying::Email => "looks like an e-mail address or user@host",
        }
    }
}

/// File name endings that mark a word as a file name.
const FILE_EXTENSIONS: [&str; 30] = [
    "py",
    "sh",
    "bash",
    "zsh",
    "ipynb",
    "csv",
    "tsv",
    "json",
    "jsonl",
    "txt",
    "log",
    "out",
    "err",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "pt",
    "pth",
    "bin",
    "ckpt",
    "safetensors",
    "gguf",
    "npy",
    "npz",
    "pkl",
    "parquet",
    "h5",
];

/// Characters of a path component (`data`, `x.csv`, `..`, `~alice`).
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._-~+%:@".contains(c)
}

/// One word of a text: is it a path, a home directory or an address?
fn identifying_word(word: &str) -> Option<Identifying> {
    let w = word.trim_end_matches(['.', ',', ':', '!', '?']);
    if w.is_empty() {
        return None;
    }
    let lower = w.to_ascii_lowercase();
    if let Some(rest) = w.strip_prefix('~') {
        if rest
            .chars()
            .next()
            .is_none_or(|c| c == '/' || c == '\\' || c.is_alphabetic() || c == '_')
        {
            return Some(Identifying::Home);
        }
    }
    if [
        "$home",
        "${home}",
        "%userprofile%",
        "%homepath%",
        "%homedrive%",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        return Some(Identifying::Home);
    }
    if let Some((user, host)) = w.split_once('@') {
        let near = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "_.-+".contains(c));
        if near(user.chars().next_back()) && near(host.chars().next()) {
            return Some(Identifying::Email);
        }
    }
    if w.contains(['/', '\\']) {
        let named = w.split(['/', '\\']).any(|part| {
            (part == "." || part == ".." || part.chars().any(|c| c.is_alphabetic()))
                && part.chars().all(is_path_char)
        });
        if named {
            return Some(Identifying::Path);
        }
    }
    if let Some((stem, ext)) = lower.rsplit_once('.') {
        if !stem.is_empty() && FILE_EXTENSIONS.contains(&ext) {
            return Some(Identifying::Path);
        }
    }
    None
}

/// Whether `s` holds a file path (absolute or relative, Unix or Windows, or
/// a file name such as `run.sh`), a home directory, an e-mail address or a
/// `user@host`.
pub fn identifying(s: &str) -> Option<Identifying> {
    let t = s.trim();
    let bytes = t.as_bytes();
    if t.starts_with('/')
        || t.starts_with("./")
        || t.starts_with("../")
        || t.starts_with("\\\\")
        || (bytes.len() > 2
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && (bytes[2] == b'\\' || bytes[2] == b'/'))
        || [
            "/home/",
            "/Users/",
            "/root/",
            "/tmp/",
            "/mnt/",
            "/work/",
            "\\Users\\",
            ".py",
            ".jsonl",
            ".sh",
        ]
        .iter()
        .any(|m| t.contains(m))
    {
        return Some(Identifying::Path);
    }
    t.split(|c: char| c.is_whitespace() || "\"'`,;()[]{}<>|=".contains(c))
        .find_map(identifying_word)
}

/// True when `s` looks like a file-system path (or a home directory).
pub fn looks_like_path(s: &str) -> bool {
    matches!(identifying(s), Some(Identifying::Path | Identifying::Home))
}

fn contains_word(hay: &str, needle: &str) -> bool {
    let hay = hay.to_lowercase();
    let needle = needle.to_lowercase();
    let mut from = 0;
    while let Some(pos) = hay[from..].find(&needle) {
        let start = from + pos;
        let end = start + needle.len();
        let before = hay[..start].chars().next_back();
        let after = hay[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + needle.len().max(1);
    }
    false
}

/// Names too common to be identifying.
const GENERIC_NAMES: [&str; 6] = ["root", "user", "admin", "localhost", "ubuntu", "debian"];

/// Why `s` may not travel: a path, a home directory, an address, or this
/// machine's host or user name; `(problem, allowed)`.
fn refusal(s: &str, id: &Identity) -> Option<(String, &'static str)> {
    if let Some(kind) = identifying(s) {
        let allowed = match kind {
            Identifying::Path => "no file paths in a profile (it is uploaded as is)",
            Identifying::Home => "no home directories in a profile (it is uploaded as is)",
            Identifying::Email => {
                "no e-mail addresses or user@host names in a profile (it is uploaded as is)"
            }
        };
        return Some((kind.problem().to_string(), allowed));
    }
    for (what, name) in [("host name", &id.host), ("user name", &id.user)] {
        if let Some(name) = name {
            if name.len() >= 3
                && !GENERIC_NAMES.contains(&name.to_lowercase().as_str())
                && contains_word(s, name)
            {
                return Some((
                    format!("contains this machine's {what}"),
                    "no host or user names in a profile",
                ));
            }
        }
    }
    None
}

/// Rejects any key or string that looks like a path, a home directory, an
/// e-mail address or `user@host`, or holds the host or user name.
pub fn scan_strings(v: &Value, at: &str, id: &Identity) -> Result<(), ProfileError> {
    match v {
        Value::String(s) => {
            let field = if at.is_empty() { "(document)" } else { at };
            match refusal(s, id) {
                Some((problem, allowed)) => Err(field_err(field, problem, allowed)),
                None => Ok(()),
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                scan_strings(item, &format!("{at}[{i}]"), id)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let path = join(at, k);
                if let Some((problem, allowed)) = refusal(k, id) {
                    return Err(field_err(
                        &printable(&path, 200),
                        format!("the key {problem}"),
                        allowed,
                    ));
                }
                scan_strings(item, &path, id)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names_are_spotted() {
        assert!(looks_like_path("/home/alice/job.py"));
        assert!(looks_like_path("C:\\Users\\bob"));
        assert!(looks_like_path("python my_job.py --len 5"));
        assert!(!looks_like_path("NVIDIA H200"));
        assert!(!looks_like_path("2.11.0+cu130"));
        assert!(contains_word("run on gpu-box-7 today", "gpu-box-7"));
        assert!(!contains_word("alicia", "alice"));
        assert!(contains_word("Alice's run", "alice"));
    }
}
