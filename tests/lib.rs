//! Helpers for the cross-crate tests in `tests/tests/`: reading measurement
//! files and comparing the core's estimates with them.

use headroom_core::readers::{ProcessHistory, Spec};
use serde_json::Value;

/// One measured case and its prediction.
#[derive(Debug, Clone)]
pub struct Compared {
    /// Case name.
    pub case: String,
    /// Model id.
    pub model: String,
    /// Predicted driver-level peak, bytes.
    pub predicted: u64,
    /// Measured driver-level peak, bytes.
    pub measured: u64,
    /// Predicted and measured reserved peaks.
    pub reserved: (u64, u64),
    /// Predicted and measured allocated peaks.
    pub allocated: (u64, u64),
}

impl Compared {
    /// Signed relative error of the driver peak.
    pub fn error(&self) -> f64 {
        (self.predicted as f64 - self.measured as f64) / self.measured as f64
    }
}

/// Estimates every case of a measurement file (JSON lines); cases whose
/// family is not modelled are returned in the second list with the reason.
pub fn compare_file(text: &str) -> (Vec<Compared>, Vec<(String, String)>) {
    let mut done = Vec::new();
    let mut skipped = Vec::new();
    let mut history = ProcessHistory::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).expect("valid JSON line");
        let case = value["case"].as_str().unwrap_or("?").to_string();
        let measured = value.get("measured");
        let failed = measured.is_some_and(|m| {
            // As `check` reads them: the harness's failures (`error`,
            // `unsupported`) and out-of-memory or failed runs are not peaks.
            m.get("error").is_some()
                || m.get("unsupported").is_some()
                || m.get("oom").and_then(Value::as_bool) == Some(true)
                || m.get("status")
                    .and_then(Value::as_str)
                    .is_some_and(|s| s != "ok")
        });
        if case == "runtime_overheads"
            || failed
            || measured.and_then(|m| m.get("driver_peak")).is_none()
        {
            continue;
        }
        let mut spec = match Spec::from_value(&value) {
            Ok(s) => s,
            Err(e) => {
                skipped.push((case, e.to_string()));
                continue;
            }
        };
        let estimate =
            headroom_core::readers::estimate_as_measured(&value, &mut spec, &mut history);
        match estimate {
            Ok(e) => {
                let m = &value["measured"];
                done.push(Compared {
                    case,
                    model: spec.model.id.clone(),
                    predicted: e.driver_peak.0,
                    measured: m["driver_peak"].as_u64().unwrap_or(0),
                    reserved: (e.reserved_peak.0, m["reserved_peak"].as_u64().unwrap_or(0)),
                    allocated: (e.allocated_peak.0, m["alloc_peak"].as_u64().unwrap_or(0)),
                });
            }
            Err(e) => skipped.push((case, e.to_string())),
        }
    }
    (done, skipped)
}

/// The public H200 measurements kept in the repository
/// (`measurements/public/h200-public.jsonl`).
pub fn public_measurements() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../measurements/public/h200-public.jsonl");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
