//! CLI tests of what `check` and `fit` refuse: checking nothing (an empty
//! file, a file of non-case lines, filters that select no case), an unknown
//! `--family`, duplicate case names, and a file given twice.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-sample.jsonl")
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The sample's case lines (not the `runtime_overheads` line).
fn case_lines() -> Vec<String> {
    std::fs::read_to_string(sample())
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"measured\"") && !l.contains("runtime_overheads"))
        .map(String::from)
        .collect()
}

/// `check` in each output form refuses with exit 1 and a message containing `want`.
fn refused_in_every_form(args: &[&str], want: &[&str]) {
    for form in [None, Some("--markdown"), Some("--json")] {
        let mut all = vec!["check"];
        all.extend(form);
        all.extend_from_slice(args);
        let out = run(&all);
        assert_eq!(out.status.code(), Some(1), "{all:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{all:?} printed a report");
        let err = stderr(&out);
        for w in want {
            assert!(err.contains(w), "{all:?}: {err:?} lacks {w:?}");
        }
    }
}

#[test]
fn check_refuses_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n# only a comment\n").unwrap();
    refused_in_every_form(
        &[s(&empty)],
        &["nothing to check", "empty.jsonl", "the file is empty"],
    );
    // Also next to a file that has cases: the empty one is a mistake.
    let sample = sample();
    refused_in_every_form(
        &[s(&sample), s(&empty)],
        &["empty.jsonl: no measurement case"],
    );
}

#[test]
fn check_refuses_a_file_with_only_non_case_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overheads.jsonl");
    std::fs::write(
        &path,
        "{\"case\": \"runtime_overheads\", \"cuda_context_bytes\": 1}\n",
    )
    .unwrap();
    refused_in_every_form(
        &[s(&path)],
        &["nothing to check", "overheads.jsonl", "runtime_overheads"],
    );
}

#[test]
fn check_refuses_filters_that_match_nothing() {
    let sample = sample();
    refused_in_every_form(
        &["--filter", "no-such-case", s(&sample)],
        &[
            "nothing to check",
            "--filter no-such-case matched none of the",
            "h200-sample.jsonl",
        ],
    );
    // A known family with no case in the file.
    refused_in_every_form(
        &["--family", "cnn", s(&sample)],
        &["--family cnn matched none of the"],
    );
    refused_in_every_form(
        &["--family", "decoder", "--filter", "esmfold", s(&sample)],
        &["--family decoder with --filter esmfold matched none"],
    );
    // The same filters that do match still pass.
    let out = run(&["check", "--family", "esm_fold", s(&sample)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn check_refuses_an_unknown_family_and_lists_the_allowed_keys() {
    let sample = sample();
    refused_in_every_form(
        &["--family", "decodr", s(&sample)],
        &["--family decodr", "decoder, encoder, vit, esmfold, cnn"],
    );
    // A case's model id is a family filter too.
    let out = run(&["check", "--family", "llama-3.1-8b", s(&sample)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn check_refuses_duplicate_case_names_naming_each_place() {
    let dir = tempfile::tempdir().unwrap();
    let lines = case_lines();
    let twice = dir.path().join("twice.jsonl");
    std::fs::write(
        &twice,
        format!("{}\n{}\n{}\n", lines[0], lines[1], lines[0]),
    )
    .unwrap();
    let name = lines[0]
        .split("\"case\": \"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap()
        .to_string();
    let at = |line: usize| format!("{}:{line}", s(&twice));
    refused_in_every_form(
        &[s(&twice)],
        &[&format!("duplicate case `{name}` at {}, {}", at(1), at(3))],
    );

    // Across files: each place is named.
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, format!("{}\n", lines[1])).unwrap();
    let first = dir.path().join("first.jsonl");
    std::fs::write(&first, format!("{}\n", lines[1])).unwrap();
    let out = run(&["check", s(&first), s(&other)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}:1, {}:1", s(&first), s(&other))),
        "{err}"
    );
}

#[test]
fn check_and_fit_refuse_the_same_file_twice() {
    let sample = sample();
    let file = s(&sample);
    refused_in_every_form(
        &[file, file],
        &["check:", "h200-sample.jsonl is given twice"],
    );
    let dir = tempfile::tempdir().unwrap();
    let out_profile = dir.path().join("profile.json");
    let out = run(&["fit", "--out", s(&out_profile), file, file]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("fit:") && err.contains("h200-sample.jsonl is given twice"),
        "{err}"
    );
    assert!(!out_profile.exists());
}

/// `fit` refuses the duplicate case names `check` refuses (a profile fitted
/// on them then failed `check`), and writes no profile.
#[test]
fn fit_refuses_duplicate_case_names_as_check_does() {
    let dir = tempfile::tempdir().unwrap();
    let lines = case_lines();
    let twice = dir.path().join("twice.jsonl");
    std::fs::write(
        &twice,
        format!("{}\n{}\n{}\n", lines[0], lines[1], lines[0]),
    )
    .unwrap();
    let out_file = dir.path().join("profile.json");
    let out = run(&["fit", s(&twice), "--out", s(&out_file)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("duplicate case `"), "{err}");
    assert!(
        err.contains(&format!("{}:1, {}:3", s(&twice), s(&twice))),
        "{err}"
    );
    assert!(!out_file.exists());
}

/// The sample with one case's measured driver peak set to 10^15 bytes
/// (and its card's memory recorded or not): the case and what it returns.
fn with_a_peak_of_a_petabyte(capacity: Option<u64>) -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = case_lines();
    let mut case: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    case["measured"]["driver_peak"] = serde_json::json!(1_000_000_000_000_000u64);
    if let Some(c) = capacity {
        case["measured"]["capacity_bytes"] = serde_json::json!(c);
    }
    lines[1] = case.to_string();
    let path = dir.path().join("doctored.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let name = case["case"].as_str().unwrap().to_string();
    (dir, path, name)
}

#[test]
fn fit_refuses_a_peak_above_its_own_card_naming_the_case() {
    let (dir, path, name) = with_a_peak_of_a_petabyte(Some(150_754_820_096));
    let profile = dir.path().join("profile.json");
    let out = run(&["fit", s(&path), "--out", s(&profile)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("case \"{name}\": `measured.driver_peak`"))
            && err.contains("`measured.capacity_bytes`: 150754820096"),
        "{err}"
    );
    assert!(!profile.exists());
}

#[test]
fn fit_out_of_range_names_the_case_that_drove_it() {
    // Without the card's memory in the file the peak cannot be refused on
    // its own; the fitted coefficient leaves its range and the message
    // names the case farthest from the others, not the first case.
    let (dir, path, name) = with_a_peak_of_a_petabyte(None);
    let profile = dir.path().join("profile.json");
    let out = run(&["fit", s(&path), "--out", s(&profile)]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("is too large"), "{err}");
    assert!(
        err.contains(&format!("the points disagree: case \"{name}\" measured")),
        "{err}"
    );
    assert!(!err.contains("Some("), "{err}");
    assert!(!profile.exists());
}
