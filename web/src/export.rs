//! Exports: the curve as CSV, the estimate as JSON.

use crate::curve::CurveData;
use crate::state::AppState;
use headroom_core::estimate::{Component, Estimate};
use headroom_core::RuntimeProfile;
use serde_json::{json, Value};

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The curve as CSV: one row per length, exact bytes per component, the
/// peak op last.
pub fn curve_csv(curve: &CurveData, vision: bool) -> String {
    let mut out = String::new();
    out.push_str(if vision { "image_size" } else { "seq_len" });
    out.push_str(",driver_peak_bytes,reserved_peak_bytes,allocated_peak_bytes");
    for c in Component::ALL {
        out.push(',');
        out.push_str(c.key());
        out.push_str("_bytes");
    }
    out.push_str(",peak_op\n");
    for (length, e) in curve.lengths.iter().zip(&curve.estimates) {
        out.push_str(&format!(
            "{length},{},{},{}",
            e.driver_peak.0, e.reserved_peak.0, e.allocated_peak.0
        ));
        for c in Component::ALL {
            out.push_str(&format!(",{}", e.component(c).0));
        }
        out.push(',');
        out.push_str(&csv_field(&e.peak_op));
        out.push('\n');
    }
    out
}

/// The estimate at the chosen length as JSON, with everything needed to
/// reproduce it: a spec (`model`, `workload`, `runtime`) the core and the
/// command line read back, with the page's link as its `source` and the
/// estimate as `predicted` (the keys a measurement case gives them), or
/// the core's refusal as `predicted.refused`.
pub fn estimate_json(
    state: &AppState,
    runtime: &RuntimeProfile,
    estimate: Result<&Estimate, &str>,
    link: &str,
) -> String {
    let model = if state.model.id == "custom" {
        let mut arch = serde_json::to_value(&state.model.arch).unwrap_or(Value::Null);
        if let Some(obj) = arch.as_object_mut() {
            obj.insert("name".into(), Value::String(state.model.name.clone()));
        }
        arch
    } else {
        Value::String(state.model.id.clone())
    };
    let predicted = match estimate {
        Ok(e) => serde_json::to_value(e).unwrap_or(Value::Null),
        Err(msg) => json!({ "refused": msg }),
    };
    let doc = json!({
        "source": link,
        "model": model,
        "workload": state.workload,
        "runtime": runtime,
        "predicted": predicted,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curve::tests::{fake, fake_curve};
    use headroom_core::readers::Spec;

    #[test]
    fn csv_has_a_header_and_one_row_per_length() {
        let csv = curve_csv(&fake_curve(&[128, 4096]), false);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("seq_len,driver_peak_bytes,"));
        assert!(lines[0].ends_with(",allocator_slack_bytes,peak_op"));
        let row: Vec<&str> = lines[2].split(',').collect();
        assert_eq!(row[0], "4096");
        assert_eq!(row[1], fake(4096).driver_peak.0.to_string());
        // The peak op holds a comma, so it is quoted.
        assert!(lines[2].ends_with(",\"layer 31: mlp, down_proj\""));
        let header_cols = lines[0].split(',').count();
        assert_eq!(row.len(), header_cols + 1, "quoted comma splits once");
        assert!(curve_csv(&CurveData::default(), true).starts_with("image_size,"));
    }

    #[test]
    fn json_export_is_a_spec_the_core_reads_back() {
        let state = AppState::default();
        let e = fake(4096);
        let text = estimate_json(
            &state,
            &RuntimeProfile::h200(),
            Ok(&e),
            "http://x/?model=llama-3.1-8b",
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["predicted"]["driver_peak"], json!(e.driver_peak.0));
        assert_eq!(v["source"], json!("http://x/?model=llama-3.1-8b"));
        let spec = Spec::from_value(&v).unwrap();
        assert_eq!(spec.workload, state.workload);
        assert_eq!(spec.model.id, "llama-3.1-8b");

        let mut custom = state.clone();
        custom.model.id = "custom".into();
        let text = estimate_json(&custom, &RuntimeProfile::h200(), Err("not supported"), "");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["predicted"]["refused"], json!("not supported"));
        assert_eq!(Spec::from_value(&v).unwrap().model.arch, state.model.arch);
    }
}
