//! A profile's measured points: measurement cases (the format of
//! `docs/spec.md`) carrying only the fields a profile may hold, each a
//! finished run of a preset model with its measured driver peak.

use super::shape::only_keys;
use super::{check_text, field_err, printable, ProfileError};
use alloc::format;
use alloc::string::ToString;
use serde_json::Value;

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

/// A point's measured driver peak, bytes (checked by [`validate_point`]).
pub(crate) fn driver_peak(point: &Value) -> u64 {
    point
        .get("measured")
        .and_then(|m| m.get("driver_peak"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// A point's `measured.reserved_peak` (torch's reserved bytes), when recorded.
pub(crate) fn reserved_peak(point: &Value) -> Option<u64> {
    point
        .get("measured")
        .and_then(|m| m.get("reserved_peak"))
        .and_then(Value::as_u64)
}

pub(crate) fn validate_point(at: &str, point: &Value, gpu_total: u64) -> Result<(), ProfileError> {
    only_keys(at, point, &POINT_KEYS)?;
    let case_field = format!("{at}.case");
    match point.get("case") {
        Some(Value::String(name)) if name == "runtime_overheads" => {
            return Err(field_err(
                &case_field,
                "is `runtime_overheads`",
                "a measured case",
            ))
        }
        Some(Value::String(name)) => check_text(&case_field, name, 200)?,
        Some(_) => {
            return Err(field_err(
                &case_field,
                "has the wrong type",
                "a non-empty string naming the case",
            ))
        }
        None => {
            return Err(field_err(
                &case_field,
                "is missing",
                "a non-empty string naming the case",
            ))
        }
    }
    let measured_field = format!("{at}.measured");
    let Some(measured) = point.get("measured") else {
        return Err(field_err(
            &measured_field,
            "is missing",
            "an object with driver_peak, reserved_peak, alloc_peak (bytes)",
        ));
    };
    only_keys(&measured_field, measured, &POINT_MEASURED_KEYS)?;
    match measured.get("status") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "ok" => {}
        Some(Value::String(s)) if s == "oom" || s == "failed" => {
            return Err(field_err(
                &format!("{measured_field}.status"),
                "is not ok",
                "only finished points (\"ok\") in a profile",
            ))
        }
        Some(v) => {
            return Err(field_err(
                &format!("{measured_field}.status"),
                format!("is {}", printable(&v.to_string(), 40)),
                "\"ok\", \"oom\" or \"failed\"",
            ))
        }
    }
    for key in ["driver_peak", "reserved_peak", "alloc_peak"] {
        if measured
            .get(key)
            .is_some_and(|v| !v.is_null() && !v.is_u64())
        {
            return Err(field_err(
                &format!("{measured_field}.{key}"),
                "is not a whole number",
                "a whole number of bytes from 0 to 2^64-1",
            ));
        }
    }
    let peak = match measured.get("driver_peak").and_then(Value::as_u64) {
        None | Some(0) => {
            return Err(field_err(
                &format!("{measured_field}.driver_peak"),
                "is missing or 0",
                "bytes from 1 to gpu.total_bytes",
            ))
        }
        Some(p) => p,
    };
    if peak > gpu_total {
        return Err(field_err(
            &format!("{measured_field}.driver_peak"),
            format!("{peak} exceeds the GPU's {gpu_total} bytes"),
            "bytes up to gpu.total_bytes",
        ));
    }
    match point.get("model") {
        Some(Value::String(id)) => {
            crate::presets::find(id)
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
    crate::readers::parse_workload(point.get("workload")).map_err(|e| {
        field_err(
            &format!("{at}.workload"),
            e.to_string(),
            "a workload object",
        )
    })?;
    if let Some(rt) = point.get("runtime") {
        only_keys(&format!("{at}.runtime"), rt, &POINT_RUNTIME_KEYS)?;
        crate::readers::parse_runtime(rt).map_err(|e| {
            field_err(
                &format!("{at}.runtime"),
                e.to_string(),
                "a measurement case's runtime",
            )
        })?;
    }
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
                    .is_some_and(|f| f.is_finite() && (-100.0..=100.0).contains(&f))
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
