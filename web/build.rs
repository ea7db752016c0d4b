//! Bundles `calibration/profiles/*.json` (repository root) and the public
//! H200 measurements into the page, each with only the fields the page
//! reads.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let dir = manifest.join("..").join("calibration").join("profiles");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let mut out = String::from("/// Bundled profiles: (file stem, the fields the page reads).\n");
    out.push_str("pub const PROFILES: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("profile");
        let text = std::fs::read_to_string(f).expect("listed file exists");
        let trimmed = out_dir.join(format!("profile-{stem}.json"));
        std::fs::write(&trimmed, page_profile(&text)).expect("OUT_DIR is writable");
        writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            trimmed.display().to_string()
        )
        .expect("writing to a String");
    }
    out.push_str("];\n");
    std::fs::write(out_dir.join("profiles.rs"), out).expect("OUT_DIR is writable");

    let public = manifest.join("../measurements/public/h200-public.jsonl");
    println!("cargo:rerun-if-changed={}", public.display());
    let text = std::fs::read_to_string(&public).expect("the public measurements");
    std::fs::write(out_dir.join("h200-public.jsonl"), page_points(&text))
        .expect("OUT_DIR is writable");
}

/// Each measured case of a JSON-lines file as [`page_case`] keeps it.
fn page_points(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value =
            serde_json::from_str(line).expect("the public file is valid JSON");
        if let Some(case) = page_case(&case) {
            out.push_str(&case.to_string());
            out.push('\n');
        }
    }
    out
}

/// A calibration profile as the page reads it (`calib::parse_profile`):
/// its name, runtime and points (each as [`page_case`] keeps it); the
/// fitted coefficients' provenance, the fit and the versions left out.
fn page_profile(text: &str) -> String {
    use serde_json::{Map, Value};
    let profile: Value = serde_json::from_str(text).expect("a bundled profile is valid JSON");
    let mut kept = Map::new();
    for key in ["name", "runtime"] {
        if let Some(v) = profile.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    if let Some(Value::Array(points)) = profile.get("points") {
        let points = points.iter().filter_map(page_case).collect();
        kept.insert("points".into(), Value::Array(points));
    }
    Value::Object(kept).to_string()
}

/// One measured case as the page reads it (`calib::parse_case`): its
/// model, workload, allocator (unless the default) and driver-level peak;
/// every other field (its name, the versions, the other peaks, parameter
/// counts) left out of the bundle.
fn page_case(case: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::{Map, Value};
    let case = case.as_object()?;
    let mut kept = Map::new();
    // The case's name is not shown: left out.
    for key in ["model", "workload"] {
        if let Some(v) = case.get(key) {
            kept.insert(key.into(), v.clone());
        }
    }
    if let Some(Value::Object(workload)) = kept.get_mut("workload") {
        drop_defaults(workload);
    }
    // The default allocator is what a case without `runtime` reads as.
    if let Some(allocator) = case
        .get("runtime")
        .and_then(|r| r.get("allocator"))
        .filter(|a| a.as_str() != Some("default"))
    {
        let mut runtime = Map::new();
        runtime.insert("allocator".into(), allocator.clone());
        kept.insert("runtime".into(), Value::Object(runtime));
    }
    if let Some(peak) = case.get("measured").and_then(|m| m.get("driver_peak")) {
        let mut measured = Map::new();
        measured.insert("driver_peak".into(), peak.clone());
        kept.insert("measured".into(), Value::Object(measured));
    }
    Some(Value::Object(kept))
}

/// Workload fields whose value is the one the page's parser takes when the
/// field is absent (a test in `web/src/calib.rs` checks that the bundled
/// points parse exactly as the public file's).
const DEFAULTS: [(&str, &str); 7] = [
    ("attention", "\"sdpa\""),
    ("loss", "\"cross_entropy_on_all_tokens\""),
    ("training.steps", "2"),
    ("training.grad_checkpointing", "false"),
    ("training.optimizer", "\"adamw\""),
    ("training.zero_grad", "\"set_to_none\""),
    ("esmfold.chunk_size", "null"),
];

fn drop_defaults(workload: &mut serde_json::Map<String, serde_json::Value>) {
    for (path, value) in DEFAULTS {
        let (object, key) = match path.split_once('.') {
            Some((outer, key)) => match workload.get_mut(outer) {
                Some(serde_json::Value::Object(inner)) => (inner, key),
                _ => continue,
            },
            None => (&mut *workload, path),
        };
        if object.get(key).map(|v| v.to_string()).as_deref() == Some(value) {
            object.remove(key);
        }
    }
}
