//! CLI tests of `estimate` and `check`: output shape, exit codes, messages.
//! The core models every case of the sample; cases it cannot compare (out of
//! memory, failed, no model) show up as skipped, never as failures.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_headroom");

fn public_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-sample.jsonl")
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn is_summary_line(line: &str) -> bool {
    let parts: Vec<&str> = line.split(' ').collect();
    if parts.len() != 5 {
        return false;
    }
    let pct = |s: &str, key: &str| {
        s.strip_prefix(key)
            .and_then(|v| v.strip_suffix('%'))
            .is_some_and(|v| {
                let (a, b) = v.split_once('.').unwrap_or(("", ""));
                !a.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.len() == 1
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
    };
    let int = |s: &str, key: &str| {
        s.strip_prefix(key)
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()))
    };
    int(parts[0], "cases=")
        && pct(parts[1], "median_abs_err=")
        && pct(parts[2], "p90_abs_err=")
        && pct(parts[3], "max_abs_err=")
        && int(parts[4], "under_5pct=")
}

#[test]
fn check_prints_one_line_per_case_and_the_exact_summary_last() {
    let out = run(&["check", public_file().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let last = lines.last().unwrap();
    assert!(is_summary_line(last), "last line `{last}`");
    let cases: Vec<&&str> = lines[..lines.len() - 1]
        .iter()
        .filter(|l| !l.starts_with('#'))
        .collect();
    // Every case line of the sample (its runtime_overheads line is not a case).
    assert_eq!(cases.len(), 5, "{stdout}");
    for line in &cases {
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols.len(), 4, "`{line}`");
        assert!(cols[1].ends_with("GB") && cols[2].ends_with("GB") && cols[3].ends_with('%'));
    }
    let n: usize = last
        .split(' ')
        .next()
        .unwrap()
        .trim_start_matches("cases=")
        .parse()
        .unwrap();
    assert_eq!(n, 5, "every case of the sample is compared: {stdout}");
}

#[test]
fn check_filters_by_substring_and_family() {
    let file = public_file();
    let out = run(
        &[
            "check",
            "--filter",
            "chunkNone_L128",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let cases: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("cases="))
        .collect();
    assert_eq!(cases.len(), 1, "{stdout}");
    assert!(cases[0].starts_with("esmfold_esm_fp16_chunkNone_L128"));

    let out = run(
        &["check", "--family", "decoder", file.to_str().unwrap()],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("llama8b_gen_b1_L2048"), "{stdout}");
    assert!(!stdout.contains("esmfold_"), "{stdout}");
}

#[test]
fn check_json_has_rows_skipped_and_summary() {
    let out = run(&["check", "--json", public_file().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = v["rows"].as_array().unwrap().len() + v["skipped"].as_array().unwrap().len();
    assert_eq!(total, 5);
    assert_eq!(
        v["summary"]["cases"].as_u64().unwrap() as usize,
        v["rows"].as_array().unwrap().len()
    );
}

#[test]
fn check_bad_input_names_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    std::fs::write(
        &path,
        "{\"case\": \"ok\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"driver_peak\": 5}}\n{\"case\": \"x\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"driver_peak\": \"big\"}}\n",
    )
    .unwrap();
    let out = run(&["check", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.jsonl:2 (case x): `measured.driver_peak`"),
        "{err}"
    );

    std::fs::write(
        &path,
        "{\"case\": \"x\", \"measured\": {\"driver_peak\": 5}\n",
    )
    .unwrap();
    let out = run(&["check", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("bad.jsonl:1: malformed JSON"),
        "{}",
        text(&out.stderr)
    );

    std::fs::write(
        &path,
        "{\"case\": \"y\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\", \"batch\": 0}, \"measured\": {\"driver_peak\": 5}}\n",
    )
    .unwrap();
    let out = run(&["check", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.jsonl:1 (case y)") && err.contains("workload.batch"),
        "{err}"
    );

    let out = run(
        &["check", dir.path().join("missing.jsonl").to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("missing.jsonl"));
}

#[test]
fn check_skips_oom_failed_and_modelless_points() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    std::fs::write(
        &path,
        concat!(
            "{\"case\": \"a\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"status\": \"oom\", \"capacity_bytes\": 10}}\n",
            "{\"case\": \"b\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"status\": \"failed\"}}\n",
            "{\"case\": \"c\", \"measured\": {\"driver_peak\": 1000}}\n",
        ),
    )
    .unwrap();
    let out = run(&["check", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("a") && stdout.contains("skipped: measured out of memory"),
        "{stdout}"
    );
    assert!(
        stdout.contains("skipped: the measurement failed"),
        "{stdout}"
    );
    assert!(stdout.contains("skipped: no `model`"), "{stdout}");
    assert!(stdout
        .trim_end()
        .ends_with("cases=0 median_abs_err=0.0% p90_abs_err=0.0% max_abs_err=0.0% under_5pct=0"));
}

#[test]
fn estimate_reads_stdin_and_files_and_names_bad_fields() {
    let out = run(
        &["estimate"],
        Some(r#"{"model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 0}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("(stdin)") && err.contains("workload.batch") && err.contains("1 to 65536"),
        "{err}"
    );

    let out = run(
        &["estimate", "-"],
        Some(r#"{"model": "nope", "workload": {"mode": "inference"}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("unknown preset `nope`"));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spec.json");
    std::fs::write(
        &path,
        "{\"model\": \"gpt2\",\n \"workload\": {\"seq_len\": }}",
    )
    .unwrap();
    let out = run(&["estimate", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("spec.json") && err.contains("malformed JSON") && err.contains("line 2"),
        "{err}"
    );

    let out = run(
        &["estimate", "--gpu", "nosuchgpu"],
        Some(r#"{"model": "gpt2", "workload": {"mode": "inference"}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--gpu: unknown GPU `nosuchgpu`"));

    // Each field in range, together too large to replay: refused by name.
    let out = run(
        &["estimate"],
        Some(
            r#"{"model": "gemma-2-27b", "workload": {"mode": "training", "batch": 64, "seq_len": 4194304, "attention": "eager"}}"#,
        ),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("`workload.batch x workload.seq_len`") && err.contains("2^60 bytes"),
        "{err}"
    );
}

#[test]
fn estimate_of_a_measured_case_is_json_and_a_table() {
    let case = std::fs::read_to_string(public_file()).unwrap();
    let line = case
        .lines()
        .find(|l| l.contains("llama8b_gen_b1_L2048"))
        .unwrap();
    let out = run(&["estimate"], Some(line));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["model"]["id"], "llama-3.1-8b");
    assert_eq!(v["inputs"]["workload"]["seq_len"], 2048);
    assert!(v["driver_peak"].as_u64().unwrap() > 16_000_000_000);
    let sum: u64 = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, v["driver_peak"].as_u64().unwrap());
    let table = run(&["estimate", "--table", "--gpu", "h200"], Some(line));
    assert_eq!(table.status.code(), Some(0));
    let t = text(&table.stdout);
    assert!(
        t.contains("driver peak") && t.contains("peak op") && t.contains("fits"),
        "{t}"
    );
}

#[test]
fn help_lists_every_command() {
    let out = run(&["--help"], None);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for cmd in ["estimate", "check"] {
        assert!(help.contains(cmd), "{help}");
    }
}

#[test]
fn gpus_lists_every_card_with_esmfold_chunking() {
    let out = run(&["gpus", "../examples/esmfold-1024.json"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("NVIDIA H200 141GB"), "{table}");
    assert!(table.contains("chunk for len"), "{table}");
    // A 12 GB card cannot fold 1024 residues at all; an H200 needs no chunking.
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap()
            .to_string()
    };
    assert!(
        line("NVIDIA GeForce RTX 3060").contains("does not fit"),
        "{table}"
    );
    assert!(line("NVIDIA H200").contains("none needed"), "{table}");
}

/// Chunked ESMFold at 1,500 residues: its unlimited peak (37.40 GB) is above
/// the RTX 5090, which runs it only by PyTorch freeing its cache at the
/// card's end. The row says one job; the note says so, with the peak the
/// replay reached there, and requests the whole card, not the unlimited
/// reservation. A card it fits outright gets no such line.
#[test]
fn gpus_says_where_the_job_fits_only_by_freeing_the_cache() {
    let spec = std::env::temp_dir().join(format!("esmfold-1500-{}.json", std::process::id()));
    std::fs::write(
        &spec,
        r#"{"model":"esmfold-v1","workload":{"mode":"inference","dtype":"fp32","seq_len":1500,"batch":1,
            "esmfold":{"stem_dtype":"fp16","chunk_size":64,"num_recycles":4}}}"#,
    )
    .unwrap();
    let out = run(&["gpus", spec.to_str().unwrap()], None);
    std::fs::remove_file(&spec).unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.starts_with("ESMFold v1 at batch 1, seq_len 1500: driver peak 37.40 GB"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("NVIDIA GeForce RTX 5090"))
        .unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[4..7], ["33.67", "GB", "yes"], "{row}");
    assert_eq!(cells[7], "1", "{row}");
    let note = table
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("NVIDIA GeForce RTX 5090: runs within")
        })
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        note.ends_with("request the whole card (33.67 GB), not 38.03 GB"),
        "{note}"
    );
    assert!(!table.contains("NVIDIA H200 141GB: runs within"), "{table}");
}

#[test]
fn gpus_rejects_a_bad_margin() {
    let out = run(
        &[
            "gpus",
            "../examples/llama-8b-generate.json",
            "--margin=5000",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--margin"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn estimate_after_earlier_jobs_in_the_same_process() {
    let dir = tempfile::tempdir().unwrap();
    let earlier = dir.path().join("earlier.json");
    std::fs::write(
        &earlier,
        r#"{"model": "gpt2", "workload": {"mode": "training", "batch": 8, "seq_len": 1024, "training": {"precision": "amp_bf16"}}}"#,
    )
    .unwrap();
    let later = r#"{"model": "gpt2", "workload": {"mode": "training", "batch": 16, "seq_len": 512, "training": {"precision": "fp32", "optimizer_state_resident": true}}}"#;
    let peak = |args: &[&str]| -> u64 {
        let out = run(args, Some(later));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["driver_peak"].as_u64().unwrap()
    };
    let alone = peak(&["estimate"]);
    let after = peak(&["estimate", "--after", earlier.to_str().unwrap()]);
    // The earlier job's optimizer state sits among segments it shared with
    // its activations (the H200: 18.59 GB measured after, this case).
    assert!(after > alone, "after {after} <= alone {alone}");

    // Another model's job before: that model is dropped, the segment
    // holding the autograd thread's cuBLAS workspace stays, and this job's
    // blocks fill it (GPT-2 fp32 training, then BERT fp32 inference: the
    // H200 reserved 1,686,110,208 bytes at BERT's peak,
    // measurements/shared-process/measured-notebook-a.jsonl).
    let gpt2 = dir.path().join("gpt2.json");
    std::fs::write(
        &gpt2,
        r#"{"model": "gpt2", "workload": {"mode": "training", "batch": 8, "seq_len": 1024, "attention": "sdpa", "training": {"optimizer": "adamw", "precision": "fp32"}}}"#,
    )
    .unwrap();
    let bert = r#"{"model": "bert-base-uncased", "workload": {"mode": "inference", "batch": 32, "seq_len": 128, "dtype": "fp32", "attention": "sdpa", "inference": {"kind": "forward", "logits": "all"}}}"#;
    let reserved = |args: &[&str]| -> u64 {
        let out = run(args, Some(bert));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["reserved_peak"].as_u64().unwrap()
    };
    assert_eq!(
        reserved(&["estimate", "--after", gpt2.to_str().unwrap()]),
        1_686_110_208
    );
    assert!(reserved(&["estimate"]) < 1_400_000_000);
    // Several earlier jobs, oldest first: BERT, then BERT again after GPT-2.
    let bert_file = dir.path().join("bert.json");
    std::fs::write(&bert_file, bert).unwrap();
    assert_eq!(
        reserved(&[
            "estimate",
            "--after",
            gpt2.to_str().unwrap(),
            "--after",
            bert_file.to_str().unwrap()
        ]),
        1_686_110_208
    );

    let out = run(
        &["estimate", "--after", "/nonexistent/earlier.json"],
        Some(later),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("earlier.json"));
}

/// The table's workload line says what runs, in the family's own terms.
#[test]
fn estimate_table_describes_the_workload_of_each_family() {
    for (spec, expected) in [
        (
            r#"{"model":"esmfold-v1","workload":{"mode":"inference","seq_len":512,"esmfold":{"chunk_size":64,"num_recycles":1}}}"#,
            "workload  inference, fold (chunk 64, 1 recycle(s), fp16 stem), batch 1, seq_len 512",
        ),
        (
            r#"{"model":"esmfold-v1","workload":{"mode":"inference","seq_len":256}}"#,
            "workload  inference, fold (unchunked, 3 recycle(s), fp16 stem), batch 1, seq_len 256",
        ),
        (
            r#"{"model":"gpt2","workload":{"mode":"inference","seq_len":256,"dtype":"fp32","inference":{"kv_cache":false,"new_tokens":4}}}"#,
            "workload  inference, generate (4 new tokens, no KV cache), batch 1, seq_len 256, fp32, sdpa attention",
        ),
        (
            r#"{"model":"llama-3.1-8b","workload":{"mode":"inference","batch":2,"seq_len":4096,"dtype":"bf16"}}"#,
            "workload  inference, generate (16 new tokens, KV cache bf16), batch 2, seq_len 4096, bf16, sdpa attention",
        ),
        (
            r#"{"model":"bert-base-uncased","workload":{"mode":"inference","batch":32,"seq_len":128,"dtype":"fp32","inference":{"kind":"forward","logits":"all"}}}"#,
            "workload  inference, forward (logits for every position), batch 32, seq_len 128, fp32, sdpa attention",
        ),
        (
            r#"{"model":"llama-3.2-1b","workload":{"mode":"training","batch":4,"seq_len":1024,"training":{"precision":"bf16","grad_checkpointing":true}}}"#,
            "workload  training, AdamW, pure bf16, 2 step(s), gradient checkpointing, batch 4, seq_len 1024, sdpa attention",
        ),
        (
            r#"{"model":"vit-b-16","workload":{"mode":"inference","batch":64,"image_size":384,"dtype":"fp16"}}"#,
            "workload  inference, forward, batch 64, image 384 px, fp16",
        ),
    ] {
        let out = run(&["estimate", "--table"], Some(spec));
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert_eq!(stdout.lines().nth(1), Some(expected), "{stdout}");
    }
}

#[test]
fn check_markdown_summarises_each_file_and_family() {
    let file = public_file();
    let path = file.to_str().unwrap();
    let out = run(&["check", "--markdown", path], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc = text(&out.stdout);
    assert!(doc.starts_with("# "), "{doc}");
    assert!(doc.contains(&format!("\n## `{path}`\n")), "{doc}");
    // The same figures as the text summary line.
    let plain = run(&["check", path], None);
    let summary = text(&plain.stdout).lines().last().unwrap().to_string();
    let figure = |key: &str| {
        summary
            .split(' ')
            .find_map(|p| p.strip_prefix(key))
            .unwrap()
            .to_string()
    };
    let all_row = format!(
        "| all | {} | {} | {} | {} | {} |",
        figure("cases="),
        figure("median_abs_err="),
        figure("p90_abs_err="),
        figure("max_abs_err="),
        figure("under_5pct=")
    );
    assert!(doc.contains(&all_row), "`{all_row}` not in\n{doc}");
    // One row per family of the sample, and every case in the case table.
    for family in ["esm_fold", "decoder", "encoder"] {
        assert!(doc.contains(&format!("\n| {family} | ")), "{family}: {doc}");
    }
    for case in ["esmfold_esm_fp16_chunkNone_L128", "llama8b_gen_b1_L2048"] {
        assert!(doc.contains(&format!("| `{case}` | ")), "{case}: {doc}");
    }

    let both = run(&["check", "--json", "--markdown", path], None);
    assert_eq!(both.status.code(), Some(1));
    assert!(text(&both.stderr).contains("--json, --markdown and --bands: pick one"));
}
