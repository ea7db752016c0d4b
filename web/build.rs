//! Bundles `calibration/profiles/*.json` (repository root) into the page,
//! and the public H200 measurements with only the fields the page reads.

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
    let mut out = String::from("/// Bundled profiles: (file stem, contents).\n");
    out.push_str("pub const PROFILES: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let stem = f.file_stem().and_then(|s| s.to_str()).unwrap_or("profile");
        let path = f.canonicalize().expect("listed file exists");
        writeln!(
            out,
            "    ({stem:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    out.push_str("];\n");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    std::fs::write(out_dir.join("profiles.rs"), out).expect("OUT_DIR is writable");

    let public = manifest.join("../measurements/public/h200-public.jsonl");
    println!("cargo:rerun-if-changed={}", public.display());
    let text = std::fs::read_to_string(&public).expect("the public measurements");
    std::fs::write(out_dir.join("h200-public.jsonl"), page_points(&text))
        .expect("OUT_DIR is writable");
}

/// Each measured case as the page reads it (`calib::parse_case`): its
/// model, workload, allocator (unless the default) and driver-level peak;
/// every other field (its name, the versions, the other peaks, parameter
/// counts) left out of the bundle.
fn page_points(text: &str) -> String {
    use serde_json::{Map, Value};
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: Value = serde_json::from_str(line).expect("the public file is valid JSON");
        let Some(case) = case.as_object() else {
            continue;
        };
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
        out.push_str(&Value::Object(kept).to_string());
        out.push('\n');
    }
    out
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
