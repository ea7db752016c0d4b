//! Every committed measurement, case list, profile and example reads as a
//! spec under the strict key rules: the measurement format's own fields are
//! known keys wherever they sit.

use headroom_core::readers::Spec;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            json_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("json" | "jsonl")
        ) {
            out.push(path);
        }
    }
}

/// The cases of a file: JSON lines, a JSON array, a profile's `points`, or
/// one spec; only objects with a `workload` (the rest are probes, overheads
/// and sweeps of other formats).
fn cases(text: &str) -> Vec<Value> {
    let whole: Option<Value> = serde_json::from_str(text).ok();
    let values: Vec<Value> = match whole {
        Some(Value::Array(items)) => items,
        Some(Value::Object(mut obj)) => match obj.remove("points") {
            Some(Value::Array(points)) => points,
            _ => vec![Value::Object(obj)],
        },
        _ => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    };
    values
        .into_iter()
        .filter(|v| v.get("workload").is_some() && v.get("model").is_some())
        .collect()
}

#[test]
fn every_committed_case_reads_as_a_spec() {
    let mut files = Vec::new();
    for dir in ["measurements", "calibration", "examples"] {
        json_files(&repo().join(dir), &mut files);
    }
    let mut read = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, case) in cases(&text).iter().enumerate() {
            if let Err(e) = Spec::from_value(case) {
                panic!("{}[{i}]: {e}", file.display());
            }
            read += 1;
        }
    }
    // Every measurement kept, not a directory that went missing.
    assert!(read >= 700, "only {read} cases read");
}
