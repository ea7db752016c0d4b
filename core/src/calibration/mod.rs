//! The calibration profile: what `headroom fit` writes, `headroom upload`
//! sends, the registry stores and `check --profile` applies.
//!
//! Reading is strict: documents over [`MAX_PROFILE_BYTES`], unknown keys at
//! any level, out-of-range numbers, oversized strings or strings with
//! control or invisible characters, and keys or values that look like file
//! paths, home directories, e-mail addresses or `user@host`, or hold the
//! caller's host or user name ([`Identity`]), are refused with a
//! [`ProfileError`] naming the field and what it accepts.
//!
//! [`recompute`] derives a profile's accuracy claims (the error summaries,
//! each point's predictions, the fit's point count and residual spread)
//! from its points with the core's own estimates, so that a reader need not
//! trust the figures a profile carries.
//!
//! ## What this module does not do
//! No IO: the caller reads the file and says who it is ([`Identity`]); the
//! clock is not read (`created` is checked for its form only).

mod points;
mod privacy;
mod recompute;
mod shape;

pub use points::{POINT_KEYS, POINT_MEASURED_KEYS, POINT_PREDICTION_KEYS, POINT_RUNTIME_KEYS};
pub use privacy::{
    identifying, is_unsafe_char, looks_like_path, printable, scan_strings, Identifying, Identity,
};
pub use recompute::{apply_profile, recompute, relative_error, Recomputed, Summary};
pub use shape::{COEFFICIENT_KEYS, FIT_KEYS, GPU_KEYS, MAX_NOTE_CHARS, PROFILE_KEYS};

use crate::runtime::RuntimeProfile;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The schema this version writes and accepts.
pub const SCHEMA_VERSION: u32 = 1;
/// Largest profile document accepted, bytes.
pub const MAX_PROFILE_BYTES: usize = 16 << 20;
/// Most points in a profile.
pub const MAX_POINTS: usize = 10_000;
/// Largest byte coefficient accepted (16 GiB).
pub const MAX_COEFFICIENT_BYTES: u64 = 16 << 30;
/// The fit bases a profile may name.
pub const FIT_BASES: [&str; 2] = ["predicted_reserved", "torch_reserved"];

/// Declares the runtime's byte coefficients once: [`COEFFICIENTS`] (their
/// names) and [`coefficients`] (their values). The destructuring names every
/// field of [`RuntimeProfile`], so a field the core adds fails to compile
/// here until it is listed as a coefficient or as not one.
macro_rules! byte_coefficients {
    ($($name:ident),* $(,)?) => {
        /// The runtime's byte coefficients, by their [`RuntimeProfile`] field names.
        pub const COEFFICIENTS: [&str; [$(stringify!($name)),*].len()] = [$(stringify!($name)),*];

        /// Each byte coefficient of `rt` with its name, in [`COEFFICIENTS`] order.
        pub fn coefficients(rt: &RuntimeProfile) -> [(&'static str, u64); COEFFICIENTS.len()] {
            let RuntimeProfile {
                $($name,)*
                // Not byte coefficients: the card, a scale, flags, counts
                // and the allocator's settings.
                gpu: _,
                gpu_total_bytes: _,
                cudnn_workspace_scale: _,
                process_ran_backward: _,
                multiprocessors: _,
                threads_per_multiprocessor: _,
                allocator: _,
            } = rt;
            [$((stringify!($name), *$name)),*]
        }
    };
}

byte_coefficients!(
    cuda_context_bytes,
    cublas_library_bytes,
    cublas_workspace_bytes,
    model_kernels_bytes,
    backward_library_bytes,
    cudnn_library_bytes,
    nccl_communicator_bytes,
    nccl_peer_bytes,
);

/// The byte coefficient `name` of a runtime, or `None` for a name that is
/// not one of [`COEFFICIENTS`].
pub fn runtime_field(rt: &RuntimeProfile, name: &str) -> Option<u64> {
    coefficients(rt)
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

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

/// Why a profile was refused.
#[derive(Clone, Debug, PartialEq)]
pub enum ProfileError {
    /// Larger than [`MAX_PROFILE_BYTES`].
    TooLarge(usize),
    /// Not JSON.
    Json(String),
    /// A field is wrong.
    Field {
        /// Dotted path, e.g. `coefficients.cuda_context_bytes.value`.
        field: String,
        /// What is wrong.
        problem: String,
        /// What the field accepts.
        allowed: String,
    },
}

impl ProfileError {
    /// The field to blame: a dotted path, `(document)` for the document as
    /// a whole.
    pub fn field(&self) -> &str {
        match self {
            ProfileError::Field { field, .. } => field,
            ProfileError::TooLarge(_) | ProfileError::Json(_) => "(document)",
        }
    }
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProfileError::TooLarge(n) => write!(
                f,
                "the profile is {n} bytes; allowed: at most {MAX_PROFILE_BYTES} bytes"
            ),
            ProfileError::Json(e) => write!(f, "malformed JSON: {e}"),
            ProfileError::Field {
                field,
                problem,
                allowed,
            } => write!(f, "`{field}`: {problem}; allowed: {allowed}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ProfileError {}

pub(crate) fn field_err(field: &str, problem: impl Into<String>, allowed: &str) -> ProfileError {
    ProfileError::Field {
        field: field.into(),
        problem: problem.into(),
        allowed: allowed.into(),
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
    if !value.is_object() {
        return Err(field_err(
            "(document)",
            "is not a JSON object",
            "a calibration profile object",
        ));
    }
    // Before serde: unknown keys at every level, including those the core's
    // lenient parsers (runtime, workload) would skip.
    shape::check_profile_shape(value)?;
    let profile: Profile = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = crate::readers::clean_serde_message(&e.into_inner().to_string());
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

pub(crate) fn check_text(field: &str, s: &str, max: usize) -> Result<(), ProfileError> {
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
    if s.chars().any(is_unsafe_char) {
        return Err(field_err(
            field,
            "contains an invisible character (bidirectional control or zero width)",
            &allowed,
        ));
    }
    Ok(())
}

fn check_version(field: &str, s: Option<&str>) -> Result<(), ProfileError> {
    if let Some(s) = s {
        let ok = !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".+-_".contains(c));
        if !ok {
            return Err(field_err(
                field,
                format!("`{}` is not a version", printable(s, 80)),
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

/// Whether `s` is an RFC 3339 date and time: `YYYY-MM-DDTHH:MM:SS`, optional
/// fractional seconds, then `Z` or `+HH:MM` / `-HH:MM`.
pub fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Option<u32> {
        let part = b.get(from..from + n)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0')))
    };
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0, 4),
        digits(5, 2),
        digits(8, 2),
        digits(11, 2),
        digits(14, 2),
        digits(17, 2),
    ) else {
        return false;
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return false;
    }
    if b[13] != b':' || b[16] != b':' {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day == 0
        || day > days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return false;
    }
    let mut at = 19;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        if at == start {
            return false;
        }
    }
    match b.get(at) {
        Some(b'Z' | b'z') => at + 1 == b.len(),
        Some(b'+' | b'-') => {
            at + 6 == b.len()
                && b[at + 3] == b':'
                && digits(at + 1, 2).is_some_and(|h| h <= 23)
                && digits(at + 4, 2).is_some_and(|m| m <= 59)
        }
        _ => false,
    }
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
    if !is_rfc3339(&p.created) {
        return Err(field_err(
            "created",
            format!("`{}` is not a date", printable(&p.created, 60)),
            "an RFC 3339 time, e.g. 2026-11-30T05:00:00Z",
        ));
    }
    check_version("collector_version", Some(&p.collector_version))?;
    check_text("gpu.name", &p.gpu.name, 128)?;
    check_bytes("gpu.total_bytes", p.gpu.total_bytes, 1 << 30, 1 << 44)?;
    if let Some(cc) = &p.gpu.compute_capability {
        let ok = cc.split_once('.').is_some_and(|(a, b)| {
            !a.is_empty()
                && a.len() <= 2
                && !b.is_empty()
                && b.len() <= 2
                && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        });
        if !ok {
            return Err(field_err(
                "gpu.compute_capability",
                format!("`{}` is not a compute capability", printable(cc, 40)),
                "null or MAJOR.MINOR, e.g. 9.0",
            ));
        }
    }
    check_version("driver", p.driver.as_deref())?;
    check_version("cuda", p.cuda.as_deref())?;
    check_version("torch", p.torch.as_deref())?;
    check_version("transformers", p.transformers.as_deref())?;
    if let Some(g) = &p.runtime.gpu {
        check_text("runtime.gpu", g, 128)?;
    }
    if let Some(t) = p.runtime.gpu_total_bytes {
        check_bytes("runtime.gpu_total_bytes", t, 1 << 30, 1 << 44)?;
    }
    let mut outside = 0u64;
    for (name, v) in coefficients(&p.runtime) {
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
        let field = format!("coefficients.{}", printable(name, 80));
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
    if !FIT_BASES.contains(&p.fit.basis.as_str()) {
        return Err(field_err(
            "fit.basis",
            format!("`{}` is unknown", printable(&p.fit.basis, 40)),
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
        points::validate_point(&format!("points[{i}]"), point, p.gpu.total_bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339() {
        assert!(is_rfc3339("2026-11-30T05:00:00Z"));
        assert!(is_rfc3339("2024-02-29T23:59:60.123+05:30"));
        assert!(!is_rfc3339("2023-02-29T00:00:00Z"));
        assert!(!is_rfc3339("yesterday"));
        assert!(!is_rfc3339("2026-11-30"));
        assert!(!is_rfc3339("2026-11-30T05:00:00"));
        assert!(!is_rfc3339("2026-13-30T05:00:00Z"));
    }

    #[test]
    fn coefficients_are_the_runtime_byte_fields() {
        let rt = RuntimeProfile::h200();
        assert_eq!(
            runtime_field(&rt, "cuda_context_bytes"),
            Some(rt.cuda_context_bytes)
        );
        assert_eq!(runtime_field(&rt, "gpu_total_bytes"), None);
        assert_eq!(coefficients(&rt).len(), COEFFICIENTS.len());
    }
}
