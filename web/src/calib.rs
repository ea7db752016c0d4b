//! Calibration data: measured points (the measurement-case format of
//! `measurements/public/`) and runtime profiles (bundled or loaded by the user).

use headroom_core::allocator::AllocatorConfig;
use headroom_core::arch::Model;
use headroom_core::readers::{parse_runtime, parse_workload};
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;
use serde_json::Value;

/// The public H200 measurements (`measurements/public/h200-public.jsonl`),
/// bundled with only the fields the page reads (`build.rs`).
pub const H200_PUBLIC: &str = include_str!(concat!(env!("OUT_DIR"), "/h200-public.jsonl"));

/// Id of the built-in profile.
pub const BUILTIN_ID: &str = "h200";

/// Id given to a profile the user loads.
pub const LOADED_ID: &str = "loaded";

mod bundled {
    include!(concat!(env!("OUT_DIR"), "/profiles.rs"));
}

/// One measured run.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredPoint {
    /// The case name.
    pub case: String,
    /// Preset id of the model.
    pub model: String,
    /// What ran.
    pub workload: Workload,
    /// Allocator setting of the run.
    pub allocator: AllocatorConfig,
    /// `measured.driver_peak`, bytes.
    pub driver_peak: u64,
}

/// A runtime profile with its measured points.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// Stable id (in URLs).
    pub id: String,
    /// Name to show.
    pub name: String,
    /// The runtime figures applied to every estimate.
    pub runtime: RuntimeProfile,
    /// Measured points overlaid on the chart.
    pub points: Vec<MeasuredPoint>,
}

/// Reads one measurement case. `Ok(None)` for lines that are not a case
/// (the `runtime_overheads` line). Errors name the field.
pub fn parse_case(value: &Value, at: &str) -> Result<Option<MeasuredPoint>, String> {
    let Some(obj) = value.as_object() else {
        return Err(format!("`{at}` is not a JSON object"));
    };
    if !obj.contains_key("workload") {
        return Ok(None);
    }
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{at}.model` is missing or not a string; allowed: a preset id"))?;
    let workload = parse_workload(obj.get("workload")).map_err(|e| format!("`{at}`: {e}"))?;
    let allocator = match obj.get("runtime") {
        Some(r) if r.is_object() => {
            parse_runtime(r)
                .map_err(|e| format!("`{at}`: {e}"))?
                .allocator
        }
        _ => AllocatorConfig::default(),
    };
    let driver_peak = obj
        .get("measured")
        .and_then(|m| m.get("driver_peak"))
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            format!("`{at}.measured.driver_peak` is missing or not a whole number; allowed: bytes, an integer")
        })?;
    Ok(Some(MeasuredPoint {
        case: obj
            .get("case")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        model: model.to_string(),
        workload,
        allocator,
        driver_peak,
    }))
}

/// Reads a JSON-lines file of cases, skipping lines that do not parse.
pub fn parse_jsonl(text: &str) -> Vec<MeasuredPoint> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .filter_map(|(i, l)| {
            let v: Value = serde_json::from_str(l).ok()?;
            parse_case(&v, &format!("line {}", i + 1)).ok().flatten()
        })
        .collect()
}

/// Reads a profile: `{"name"?, "runtime": {...}, "points"?: [cases]}`.
/// Errors name the offending field.
///
/// Looser than the core's reader (`headroom_core::calibration::from_value`,
/// which the collector and the registry use): a hand-written `{"runtime":
/// ...}` loads too, and the page's start bundle, 116 bytes under its gzip
/// budget, has no room for the strict reader's shape tables and privacy
/// scan. Profiles from the registry were checked by the strict reader
/// before they were stored.
pub fn parse_profile(text: &str, id: &str) -> Result<Profile, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("malformed JSON: {e}"))?;
    let obj = value.as_object().ok_or(
        "the profile is not a JSON object; allowed: {\"runtime\": {...}, \"points\": [...]}",
    )?;
    let runtime = match obj.get("runtime") {
        Some(r) => parse_runtime(r).map_err(|e| e.to_string())?,
        None => {
            return Err(
                "`runtime` is missing; allowed: an object of byte counts (cuda_context_bytes, cublas_library_bytes, ...)"
                    .into(),
            )
        }
    };
    let mut points = Vec::new();
    match obj.get("points") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if let Some(p) = parse_case(item, &format!("points[{i}]"))? {
                    points.push(p);
                }
            }
        }
        Some(_) => {
            return Err("`points` is not a list; allowed: a list of measurement cases".into())
        }
    }
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| runtime.gpu.clone())
        .unwrap_or_else(|| id.to_string());
    Ok(Profile {
        id: id.to_string(),
        name,
        runtime,
        points,
    })
}

/// The built-in profile: core's H200 defaults and the bundled H200 points.
pub fn builtin() -> Profile {
    Profile {
        id: BUILTIN_ID.into(),
        name: "NVIDIA H200, torch 2.11 + CUDA 13: headroom's defaults".into(),
        runtime: RuntimeProfile::h200(),
        points: parse_jsonl(H200_PUBLIC),
    }
}

/// Every bundled profile: the built-in one, then each
/// `calibration/profiles/*.json` of the repository (id = file stem).
/// Files that do not parse are skipped (the build's tests catch them).
pub fn bundled() -> Vec<Profile> {
    let mut out = vec![builtin()];
    for (id, text) in bundled::PROFILES {
        if let Ok(p) = parse_profile(text, id) {
            out.push(p);
        }
    }
    out
}

/// Where the profile `id` came from, as the profile select says it.
pub fn source_of(id: &str) -> &'static str {
    if id == BUILTIN_ID {
        "built in"
    } else if id == LOADED_ID {
        "loaded file"
    } else if crate::registry::profile_number(id).is_some() {
        "from the registry"
    } else {
        "bundled collector file"
    }
}

/// Raw bundled profile files `(id, text)`.
pub fn bundled_files() -> &'static [(&'static str, &'static str)] {
    bundled::PROFILES
}

/// Measured points that match the model and the workload (all but the
/// length on the x axis), as `(length, driver_peak)` sorted by length.
pub fn matching(
    points: &[MeasuredPoint],
    model: &Model,
    workload: &Workload,
    runtime: &RuntimeProfile,
) -> Vec<(u32, u64)> {
    let vision = model.arch.is_vision();
    let base = workload.with_length(vision, 0);
    let mut out: Vec<(u32, u64)> = points
        .iter()
        .filter(|p| {
            p.model == model.id
                && p.allocator == runtime.allocator
                && p.workload.with_length(vision, 0) == base
        })
        .map(|p| (p.workload.length(vision), p.driver_peak))
        .collect();
    crate::sort::by_key(&mut out, |&(length, peak)| (length.into(), peak));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults::workload_for;
    use headroom_core::presets;

    /// The bundle keeps only what the page reads of the public file
    /// (`web/build.rs`): each point parses as the full line does, bar the
    /// case's name.
    #[test]
    fn bundled_points_parse_as_the_public_file() {
        let full = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../measurements/public/h200-public.jsonl"
        ))
        .unwrap();
        let unnamed: Vec<MeasuredPoint> = parse_jsonl(&full)
            .into_iter()
            .map(|p| MeasuredPoint {
                case: String::new(),
                ..p
            })
            .collect();
        assert_eq!(builtin().points, unnamed);
    }

    #[test]
    fn bundled_h200_points_parse() {
        let p = builtin();
        assert_eq!(p.points.len(), 24);
        assert!(p.points.iter().all(|p| p.driver_peak > 1_000_000_000));
    }

    /// The bundled profiles carry only what the page reads (`web/build.rs`):
    /// each parses as its file in `calibration/profiles/` does, bar the
    /// points' names.
    #[test]
    fn bundled_profiles_parse_as_their_files() {
        assert!(!bundled_files().is_empty());
        for (id, text) in bundled_files() {
            let full = std::fs::read_to_string(format!(
                "{}/../calibration/profiles/{id}.json",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let mut expected = parse_profile(&full, id).unwrap();
            for p in &mut expected.points {
                p.case.clear();
            }
            assert!(!expected.points.is_empty(), "{id}");
            assert_eq!(parse_profile(text, id).unwrap(), expected, "{id}");
            assert!(text.len() < full.len() / 2, "{id}: {} bytes", text.len());
        }
    }

    #[test]
    fn bundled_profiles_all_parse() {
        for (id, text) in bundled_files() {
            parse_profile(text, id)
                .unwrap_or_else(|e| panic!("calibration/profiles/{id}.json: {e}"));
        }
    }

    #[test]
    fn default_workloads_pick_up_measured_points() {
        let points = builtin().points;
        let rt = RuntimeProfile::h200();
        let check = |id: &str, batch: u32, expect: usize| {
            let model = presets::find(id).unwrap().model();
            let mut w = workload_for(&model.arch);
            w.batch = batch;
            let m = matching(&points, &model, &w, &rt);
            assert_eq!(m.len(), expect, "{id} batch {batch}: {m:?}");
        };
        check("llama-3.1-8b", 1, 4);
        check("esmfold-v1", 1, 8);
        check("bert-base-uncased", 32, 2);
        check("esm2-t33-650m", 1, 1);
        check("resnet-50", 64, 1);
        check("gpt2", 1, 0);
    }

    #[test]
    fn profile_errors_name_the_field() {
        let bad = [
            ("[1]", "not a JSON object"),
            ("{}", "`runtime` is missing"),
            (r#"{"runtime": {"cuda_context_bytes": -1}}"#, "runtime"),
            (r#"{"runtime": {}, "points": 3}"#, "`points`"),
            (
                r#"{"runtime": {}, "points": [{"model": "gpt2", "workload": {"mode": "inference", "batch": 0}, "measured": {"driver_peak": 1}}]}"#,
                "workload.batch",
            ),
            (
                r#"{"runtime": {}, "points": [{"model": "gpt2", "workload": {"mode": "inference"}, "measured": {}}]}"#,
                "points[0].measured.driver_peak",
            ),
            ("{", "malformed JSON"),
        ];
        for (text, needle) in bad {
            let err = parse_profile(text, "x").unwrap_err();
            assert!(err.contains(needle), "`{err}` lacks `{needle}`");
        }
        let ok = parse_profile(
            r#"{"name": "my 4090", "runtime": {"cuda_context_bytes": 500000000, "allocator": "expandable_segments"}, "points": [{"case": "a", "model": "gpt2", "workload": {"mode": "inference", "seq_len": 512}, "measured": {"driver_peak": 2000000000}}]}"#,
            "loaded",
        )
        .unwrap();
        assert_eq!(ok.name, "my 4090");
        assert_eq!(ok.runtime.cuda_context_bytes, 500_000_000);
        assert!(ok.runtime.allocator.expandable_segments);
        assert_eq!(ok.points.len(), 1);
    }
}
