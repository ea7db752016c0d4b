//! `docs/accuracy.md` is what `check --markdown` prints over the measurement
//! files of `scripts/accuracy-files.txt`: it cannot drift from the data or
//! the model.

use crate::common;

use common::{bin, text};
use std::path::{Path, PathBuf};
use std::process::Command;

const REGENERATE: &str = "regenerate it with `scripts/accuracy-doc.sh` and commit the result";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The files of `scripts/accuracy-files.txt`, relative to the repository.
fn listed_files() -> Vec<String> {
    let list = std::fs::read_to_string(repo().join("scripts/accuracy-files.txt"))
        .expect("scripts/accuracy-files.txt");
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn docs_accuracy_md_is_what_check_markdown_prints() {
    let files = listed_files();
    let out = Command::new(bin())
        .current_dir(repo())
        .arg("check")
        .arg("--markdown")
        .args(&files)
        .output()
        .expect("binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let fresh = text(&out.stdout);
    let committed = std::fs::read_to_string(repo().join("docs/accuracy.md"))
        .unwrap_or_else(|e| panic!("docs/accuracy.md: {e}; {REGENERATE}"));
    if committed != fresh {
        let (line, (was, now)) = committed
            .lines()
            .chain(std::iter::repeat("(end of file)"))
            .zip(fresh.lines().chain(std::iter::repeat("(end of file)")))
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .expect("texts differ");
        panic!(
            "docs/accuracy.md is out of date (first difference at line {}):\n  committed: {was}\n  now:       {now}\n{REGENERATE}",
            line + 1
        );
    }
}

/// Every generalization batch measured is in the document, and every listed
/// file exists.
#[test]
fn the_accuracy_list_names_every_measured_batch() {
    let files = listed_files();
    for file in &files {
        assert!(
            repo().join(file).is_file(),
            "scripts/accuracy-files.txt: {file} does not exist"
        );
    }
    for required in [
        "measurements/public/h200-public-history.jsonl",
        "measurements/h200/validation.jsonl",
        "measurements/h200/mixtral.jsonl",
    ] {
        assert!(
            files.iter().any(|f| f == required),
            "scripts/accuracy-files.txt lacks {required}"
        );
    }
    let dir = repo().join("measurements/h200-generalization");
    let mut batches = 0;
    for entry in std::fs::read_dir(&dir).expect("measurements/h200-generalization") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("measured") && name.ends_with(".jsonl") {
            batches += 1;
            let path = format!("measurements/h200-generalization/{name}");
            assert!(
                files.contains(&path),
                "scripts/accuracy-files.txt lacks {path}: add it, then {REGENERATE}"
            );
        }
    }
    assert!(batches >= 15, "{batches} generalization batches found");
}

/// The core's error bands (`core/src/uncertainty/measured.rs`) are what
/// `check --bands` prints over the same files: the likely ranges cannot
/// drift from the data.
#[test]
fn the_error_bands_are_what_check_bands_prints() {
    let out = Command::new(bin())
        .current_dir(repo())
        .arg("check")
        .arg("--bands")
        .args(listed_files())
        .output()
        .expect("binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let committed = std::fs::read_to_string(repo().join("core/src/uncertainty/measured.rs"))
        .expect("core/src/uncertainty/measured.rs");
    assert!(
        committed == text(&out.stdout),
        "core/src/uncertainty/measured.rs is out of date; regenerate it with `scripts/error-bands.sh` and commit the result"
    );
}

/// Over every committed measurement, the measured peak lies in the likely
/// range in at least 95% of cases, and the range's half-width has a median
/// of at most 3%.
#[test]
fn the_likely_range_holds_the_measurements_and_stays_narrow() {
    let out = Command::new(bin())
        .current_dir(repo())
        .arg("check")
        .args(listed_files())
        .output()
        .expect("binary runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .nth(1)
        .expect("the range line before the summary");
    // "# likely range: 313 of 313 measured peaks inside (100.0%); median half-width 2.8%"
    let numbers: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse().ok())
        .collect();
    let [inside, cases, _, half_width] = numbers[..] else {
        panic!("unexpected range line: {line}")
    };
    assert!(cases >= 300.0, "{line}");
    assert!(inside >= 0.95 * cases, "{line}");
    assert!(half_width <= 3.0, "{line}");
}
