//! `estimate --timeline FILE.csv`: memory over the job.

mod common;
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
        Some("first_event,events,step,layer,op,allocated_bytes,reserved_bytes,driver_bytes")
    );
    let rows: Vec<Vec<String>> = lines
        .map(|l| {
            // The op is quoted and may hold commas.
            let (head, rest) = l.split_once(",\"").unwrap();
            let (op, tail) = rest.rsplit_once("\",").unwrap();
            let mut cells: Vec<String> = head.split(',').map(String::from).collect();
            cells.push(op.to_string());
            cells.extend(tail.split(',').map(String::from));
            cells
        })
        .collect();
    assert!(rows.len() > 10 && rows.len() <= 1024, "{}", rows.len());
    let column = |i: usize| rows.iter().map(move |r| r[i].parse::<u64>().unwrap());
    assert_eq!(column(7).max(), estimate["driver_peak"].as_u64());
    assert_eq!(column(6).max(), estimate["reserved_peak"].as_u64());
    assert_eq!(column(5).max(), estimate["allocated_peak"].as_u64());
    // The steps follow one another.
    let steps: Vec<u64> = rows.iter().filter_map(|r| r[2].parse().ok()).collect();
    assert!(steps.windows(2).all(|s| s[0] <= s[1]));
    assert_eq!(steps.last(), Some(&2));
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
