//! Every file of `examples/` is estimated by the CLI and compared with its
//! committed golden output (`tests/data/examples/<name>.json.golden`: the
//! JSON estimate; `<name>.table.golden`: `--table --gpu h200`). An estimate
//! changes only deliberately: rerun with `HEADROOM_BLESS=1` to rewrite the
//! goldens, then review and commit the diff.

use crate::common;

use common::{run, text};
use std::io::Write;
use std::path::{Path, PathBuf};

const BLESS: &str = "HEADROOM_BLESS=1 cargo test -p calibration-collector --test it examples::";

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no files in examples/");
    files
}

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/examples")
}

fn blessing() -> bool {
    std::env::var("HEADROOM_BLESS").is_ok_and(|v| v == "1")
}

/// Compares `now` with the golden file, or rewrites the golden file when
/// blessing (saying so on the test run's output). Returns a description of
/// the mismatch, if any.
fn compare(golden: &Path, now: &str) -> Option<String> {
    let name = golden.file_name().unwrap().to_string_lossy().into_owned();
    if blessing() {
        let old = std::fs::read_to_string(golden).ok();
        if old.as_deref() != Some(now) {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            std::fs::write(golden, now).unwrap();
            let _ = writeln!(
                std::io::stderr(),
                "HEADROOM_BLESS=1: rewrote tests/data/examples/{name}"
            );
        }
        return None;
    }
    let Ok(old) = std::fs::read_to_string(golden) else {
        return Some(format!("{name}: no golden file; create it with `{BLESS}`"));
    };
    if old == now {
        return None;
    }
    let (line, (was, is)) = old
        .lines()
        .chain(std::iter::repeat("(end of file)"))
        .zip(now.lines().chain(std::iter::repeat("(end of file)")))
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .expect("texts differ");
    Some(format!(
        "{name}: differs at line {}\n    golden: {was}\n    now:    {is}",
        line + 1
    ))
}

#[test]
fn every_example_matches_its_golden_estimate() {
    let mut failures = Vec::new();
    let mut expected_goldens = Vec::new();
    for example in examples() {
        let stem = example.file_stem().unwrap().to_string_lossy().into_owned();
        let path = example.to_str().unwrap();
        for (kind, args) in [
            ("json", vec!["estimate", path]),
            ("table", vec!["estimate", "--table", "--gpu", "h200", path]),
        ] {
            let out = run(&args, None);
            assert_eq!(
                out.status.code(),
                Some(0),
                "examples/{stem}: {}",
                text(&out.stderr)
            );
            let golden = golden_dir().join(format!("{stem}.{kind}.golden"));
            expected_goldens.push(golden.clone());
            failures.extend(compare(&golden, &text(&out.stdout)));
        }
    }
    // A golden file whose example is gone is stale.
    for entry in std::fs::read_dir(golden_dir()).expect("tests/data/examples") {
        let path = entry.unwrap().path();
        if !expected_goldens.contains(&path) {
            failures.push(format!(
                "{}: no example of that name in examples/; delete it",
                path.display()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the estimates of examples/ changed:\n  {}\nIf the change is intended, rewrite the goldens with `{BLESS}` and commit them with the change.",
        failures.join("\n  ")
    );
}
