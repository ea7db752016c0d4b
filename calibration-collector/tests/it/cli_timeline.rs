//! `estimate --timeline FILE.csv`: memory over the job.

use crate::common;
use common::{run, text};

#[test]
fn the_timeline_csv_peaks_at_the_estimate() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("timeline.csv");
    let spec = r#"{"model": "llama-3.2-1b", "workload": {"mode": "training", "batch": 2, "seq_len": 1024, "training": {"steps": 3}}}"#;
    let out = run(
        &["estimate", "--timeline", csv.to_str().unwrap()],
        Some(spec),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let estimate: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("first_event,events,phase,step,layer,op,allocated_bytes,reserved_bytes,driver_bytes")
    );
    let rows: Vec<Vec<String>> = lines.map(cells).collect();
    assert!(rows.len() > 10 && rows.len() <= 1024, "{}", rows.len());
    assert!(rows.iter().all(|r| r.len() == 9), "nine cells a row");
    let column = |i: usize| rows.iter().map(move |r| r[i].parse::<u64>().unwrap());
    assert_eq!(column(8).max(), estimate["driver_peak"].as_u64());
    assert_eq!(column(7).max(), estimate["reserved_peak"].as_u64());
    assert_eq!(column(6).max(), estimate["allocated_peak"].as_u64());
    // The steps follow one another.
    let steps: Vec<u64> = rows.iter().filter_map(|r| r[3].parse().ok()).collect();
    assert!(steps.windows(2).all(|s| s[0] <= s[1]));
    assert_eq!(steps.last(), Some(&3), "three steps, counted from 1");
    // Each row's step is its phase's.
    for r in &rows {
        let named = r[2].rsplit_once("step ").map(|(_, n)| n.to_string());
        assert_eq!(named.unwrap_or_default(), r[3], "{r:?}");
    }
    // The phases: loading, then each step's forward, backward and optimizer.
    let mut phases: Vec<&str> = rows.iter().map(|r| r[2].as_str()).collect();
    phases.dedup();
    assert_eq!(phases[0], "load");
    for step in 1..=3 {
        for phase in ["forward", "backward", "optimizer"] {
            let label = format!("{phase}, step {step}");
            assert!(phases.contains(&label.as_str()), "{label} in {phases:?}");
        }
    }
}

/// The cells of one CSV row: quoted cells may hold commas and `""`.
fn cells(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let (mut quoted, mut chars) = (false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(String::new()),
            (c, _) => out.last_mut().unwrap().push(c),
        }
    }
    out
}

#[test]
fn a_timeline_after_an_earlier_job_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let earlier = dir.path().join("earlier.json");
    std::fs::write(
        &earlier,
        r#"{"model": "gpt2", "workload": {"mode": "training"}}"#,
    )
    .unwrap();
    let out = run(
        &[
            "estimate",
            "--after",
            earlier.to_str().unwrap(),
            "--timeline",
            "x.csv",
        ],
        Some(r#"{"model": "gpt2", "workload": {"mode": "training"}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--timeline: not with --after"),
        "{}",
        text(&out.stderr)
    );
    assert!(!std::path::Path::new("x.csv").exists());
}

/// `--timeline` never replaces a file it was not told to: the spec itself
/// named as the timeline (`estimate --timeline v.json v.json`) is refused
/// and left as it was; `--force` replaces a file.
#[test]
fn an_existing_timeline_file_is_refused_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("v.json");
    let spec = r#"{"model": "gpt2", "workload": {"mode": "inference", "seq_len": 64}}"#;
    std::fs::write(&spec_path, spec).unwrap();
    let p = spec_path.to_str().unwrap();
    let out = run(&["estimate", "--timeline", p, p], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("exists; pass --force to replace it"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&spec_path).unwrap(), spec);
    let csv = dir.path().join("t.csv");
    std::fs::write(&csv, "old").unwrap();
    let c = csv.to_str().unwrap();
    let out = run(&["estimate", "--timeline", c, "--force", p], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(std::fs::read_to_string(&csv)
        .unwrap()
        .starts_with("first_event,"));
}
