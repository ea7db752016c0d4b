//! The calibration profile: what `fit` writes, `upload` sends, `check
//! --profile` applies and the page bundles from `calibration/profiles/`.
//!
//! Reading is strict: unknown fields, out-of-range numbers, oversized or
//! control-character strings, file paths and the local host or user name are
//! rejected with a message naming the field. The page reads the same file
//! through `name`, `runtime` and `points`.

use crate::cases::{classify, Classified, Origin, Record, Status};
use crate::stats::Summary;
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

/// Validates a profile given as a JSON value.
pub fn from_value(value: &Value, identity: &Identity) -> Result<Profile, ProfileError> {
    let obj = value.as_object().ok_or_else(|| {
        field_err(
            "(document)",
            "is not a JSON object",
            "a calibration profile object",
        )
    })?;
    // Checks serde would not make: runtime is lenient in the core.
    if let Some(Value::Object(rt)) = obj.get("runtime") {
        let known = runtime_keys();
        for key in rt.keys() {
            if !known.contains(key) {
                return Err(field_err(
                    &format!("runtime.{key}"),
                    "unknown field",
                    &known.join(", "),
                ));
            }
        }
    }
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
            return Err(field_err(
                &format!("{field}.{key}"),
                "unknown field",
                &allowed.join(", "),
            ));
        }
    }
    Ok(())
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

/// True when `s` looks like a file-system path.
pub fn looks_like_path(s: &str) -> bool {
    let t = s.trim();
    let bytes = t.as_bytes();
    t.starts_with('/')
        || t.starts_with("~/")
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

/// Rejects any string that looks like a path or holds the host or user name.
pub fn scan_strings(v: &Value, at: &str, id: &Identity) -> Result<(), ProfileError> {
    match v {
        Value::String(s) => {
            let field = if at.is_empty() { "(document)" } else { at };
            if looks_like_path(s) {
                return Err(field_err(
                    field,
                    "looks like a file path",
                    "no file paths in a profile (it is uploaded as is)",
                ));
            }
            for (what, name) in [("host name", &id.host), ("user name", &id.user)] {
                if let Some(name) = name {
                    if name.len() >= 3
                        && !GENERIC_NAMES.contains(&name.to_lowercase().as_str())
                        && contains_word(s, name)
                    {
                        return Err(field_err(
                            field,
                            format!("contains this machine's {what}"),
                            "no host or user names in a profile",
                        ));
                    }
                }
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                scan_strings(item, &format!("{at}[{i}]"), id)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
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
