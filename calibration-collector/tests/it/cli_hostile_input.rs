//! The CLI under careless and hostile input: misspelled keys, wrong command
//! lines, unbounded files, control characters, IO errors. Each case once
//! printed a wrong answer with exit 0, panicked, or grew without bound.

use crate::common;
use common::{run, text};
use std::io::Write;

fn temp_file(name: &str, contents: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(contents)
        .unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

#[track_caller]
fn fails_with(args: &[&str], stdin: Option<&str>, code: i32, needles: &[&str]) -> String {
    let out = run(args, stdin);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_misspelled_key_is_an_error_not_the_default() {
    fails_with(
        &["estimate"],
        Some(r#"{"model":"llama-3.1-8b","workload":{"mode":"training","batch":8,"seqlen":32768}}"#),
        1,
        &["`workload.seqlen`: unknown key; did you mean `seq_len`?"],
    );
    fails_with(
        &["gpus"],
        Some(
            r#"{"model":"llama-3.1-8b","workload":{"mode":"training","training":{"optimiser":"sgd"}}}"#,
        ),
        1,
        &["`workload.training.optimiser`", "did you mean `optimizer`?"],
    );
    fails_with(
        &["estimate"],
        Some(r#"{"model":"llama-3.1-8b","workload":{}}"#),
        1,
        &["`workload.mode` is missing"],
    );
    fails_with(
        &["estimate"],
        Some(
            r#"{"model":"llama-3.1-8b","workload":{"mode":"training","training":{"lora":{"rank":8,"target_modules":["nonexistent"]}}}}"#,
        ),
        1,
        &[
            "`workload.training.lora.target_modules`",
            "`nonexistent`",
            "\"q_proj\"",
        ],
    );
}

#[test]
fn a_wrong_command_line_has_its_own_exit_code() {
    let err = fails_with(&["estimate", "--bogus"], None, 64, &["--bogus"]);
    assert!(err.contains("Usage:"), "{err}");
    fails_with(&["no-such-command"], None, 64, &["no-such-command"]);
    fails_with(&["check"], None, 64, &[]);
    // Help and version are answers, not errors.
    assert_eq!(run(&["--help"], None).status.code(), Some(0));
    assert_eq!(run(&["--version"], None).status.code(), Some(0));
    let help = text(&run(&["--help"], None).stdout);
    assert!(help.contains("64 wrong command line"), "{help}");
}

#[test]
fn an_io_error_says_what_failed_once() {
    let err = fails_with(
        &["estimate", "/nonexistent/spec.json"],
        None,
        1,
        &["/nonexistent/spec.json: No such file or directory (os error 2)"],
    );
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn inputs_are_capped_before_parsing() {
    // An endless device of binary: refused at its first invalid byte
    // (within the first chunk), not read to the limit.
    fails_with(
        &["estimate", "/dev/urandom"],
        None,
        1,
        &["/dev/urandom: not UTF-8 text (invalid byte at offset"],
    );
    let started = std::time::Instant::now();
    fails_with(
        &["check", "/dev/urandom"],
        None,
        1,
        &["/dev/urandom: not UTF-8 text"],
    );
    println!("check /dev/urandom refused in {:?}", started.elapsed());
    // An endless device of text: refused after reading just past the limit.
    fails_with(
        &["estimate", "/dev/zero"],
        None,
        1,
        &[
            "/dev/zero: more than 4194304 bytes",
            "a spec of at most 4194304 bytes (4 MiB)",
        ],
    );
    let measurements = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../measurements/public/h200-public.jsonl"
    );
    fails_with(
        &["check", measurements, "--profile", "/dev/urandom"],
        None,
        1,
        &["/dev/urandom: not UTF-8 text"],
    );
    // A regular file by its size, before reading it.
    let (_dir, big) = temp_file("big.json", &vec![b' '; 5 << 20]);
    fails_with(
        &["estimate", &big],
        None,
        1,
        &["the file is 5242880 bytes", "at most 4194304 bytes"],
    );
    // One enormous line of a measurement file.
    let mut line = br#"{"case": ""#.to_vec();
    line.extend(std::iter::repeat_n(b'x', 2 << 20));
    line.extend(br#"", "model": "gpt2", "workload": {"mode": "inference"}, "measured": {"driver_peak": 1}}"#);
    let (_dir2, long) = temp_file("long.jsonl", &line);
    fails_with(
        &["check", &long],
        None,
        1,
        &[":1: the line is", "at most 1048576 bytes (1 MiB) per line"],
    );
    // Bytes that are not text.
    let (_dir3, binary) = temp_file("binary.json", &[0xff, 0xfe, 0x00, 0x7b]);
    fails_with(&["estimate", &binary], None, 1, &["not UTF-8 text"]);
}

#[test]
fn text_from_files_cannot_drive_the_terminal() {
    let case = "{\"case\": \"\\u001b]0;owned\\u0007\\u001b[2J\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\"}, \"measured\": {\"driver_peak\": 1000000000}}\n";
    let (_dir, file) = temp_file("ctl.jsonl", case.as_bytes());
    let out = run(&["check", &file], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert!(stdout.contains("\\u{1b}]0;owned\\u{7}"), "{stdout}");
    // In an error message too.
    let bad = "{\"case\": \"\\u001b[2J\", \"model\": \"gpt2\", \"workload\": {\"mode\": \"inference\", \"batch\": 0}, \"measured\": {\"driver_peak\": 1}}\n";
    let (_dir2, file) = temp_file("ctl-bad.jsonl", bad.as_bytes());
    let err = fails_with(
        &["check", &file],
        None,
        1,
        &["\\u{1b}[2J", "workload.batch"],
    );
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn a_bad_profile_is_blamed_on_the_profile() {
    let (_dir, profile) = temp_file(
        "profile.json",
        br#"{"runtime": {"cuda_context_bytes": -5}}"#,
    );
    let measurements = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../measurements/public/h200-public.jsonl"
    );
    let err = fails_with(
        &["check", measurements, "--profile", &profile],
        None,
        1,
        &[
            "profile.json: `runtime.cuda_context_bytes`",
            "a whole number of bytes",
        ],
    );
    assert!(!err.contains("h200-public.jsonl"), "{err}");
}

#[test]
fn fit_names_the_field_the_user_wrote() {
    let case = br#"{"case": "a", "model": "gpt2", "workload": {"mode": "inference"}, "measured": {"driver_peak": 1000000000}}"#;
    let (dir, file) = temp_file("points.jsonl", case);
    let out_path = dir.path().join("profile.json");
    let err = fails_with(
        &["fit", &file, "--out", out_path.to_str().unwrap()],
        None,
        1,
        &["`runtime.gpu_total_bytes` is missing"],
    );
    assert!(!err.contains("gpu.total_bytes`"), "{err}");
}

#[test]
fn an_estimate_without_a_card_shows_no_figure_a_card_could_not() {
    // Without a card the allocator never runs out, so it never releases its
    // cache: 131,072 decode steps of GPT-2 "reserve" about 250 GB while the
    // job needs a few. The figures are then those of the largest card.
    let spec = r#"{"model": "gpt2", "workload": {"mode": "inference", "seq_len": 128, "inference": {"kind": "generate", "new_tokens": 131072}}}"#;
    let out = run(&["estimate"], Some(spec));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let card = &json["without_a_card"];
    let usable = card["estimated_on"]["usable_bytes"].as_u64().unwrap();
    let largest = headroom_core::gpus::CATALOG
        .iter()
        .map(|g| g.usable_bytes)
        .max()
        .unwrap();
    assert_eq!(usable, largest);
    assert!(card["unlimited_card_driver_peak"].as_u64().unwrap() > largest);
    assert!(json["driver_peak"].as_u64().unwrap() <= largest, "{json}");
    // A job no card holds says so.
    let out = run(
        &["estimate", "--table"],
        Some(r#"{"model": "llama-3.1-70b", "workload": {"mode": "training", "seq_len": 512}}"#),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("does not fit any single card of the catalog"),
        "{}",
        text(&out.stdout)
    );
    // A job that fits every large card has no note.
    let out = run(
        &["estimate"],
        Some(r#"{"model": "gpt2", "workload": {"mode": "inference"}}"#),
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.get("without_a_card").is_none(), "{json}");
}

#[test]
fn long_checks_show_progress_on_a_terminal_only() {
    // Work is "long" after HEADROOM_PROGRESS_AFTER_MS (1 s by default):
    // with 0 every check is, with ten minutes none of these is.
    let public = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../measurements/public/h200-public.jsonl"
    );
    // Not a terminal: nothing but the report.
    let out = common::run_env(
        &["check", public],
        None,
        &[("HEADROOM_PROGRESS_AFTER_MS", "0")],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    // A terminal (util-linux `script` gives the command one).
    let on_a_terminal = |after_ms: &str| {
        let command = format!(
            "HEADROOM_PROGRESS_AFTER_MS={after_ms} {} check {public} > /dev/null",
            common::bin()
        );
        let out = std::process::Command::new("script")
            .args(["-qc", &command, "/dev/null"])
            .output()
            .expect("util-linux `script` runs");
        text(&out.stdout)
    };
    let shown = on_a_terminal("0");
    assert!(shown.contains("/25 cases"), "{shown:?}");
    let shown = on_a_terminal("600000");
    assert!(!shown.contains("cases"), "{shown:?}");
}

/// A key given twice kept its last value silently: refused, by path, in a
/// spec, a pasted config, `run --workload` and a measurement file.
#[test]
fn a_repeated_key_is_refused_naming_it() {
    let spec = r#"{"model":"gpt2","workload":{"mode":"inference","seq_len":512,"seq_len":4096}}"#;
    for cmd in ["estimate", "gpus"] {
        fails_with(
            &[cmd],
            Some(spec),
            1,
            &["`workload.seq_len` is given twice"],
        );
    }
    fails_with(
        &["estimate"],
        Some(
            r#"{"model":{"hf_config":{"model_type":"gpt2","n_layer":2,"n_layer":48}},"workload":{"mode":"inference","seq_len":64}}"#,
        ),
        1,
        &["`model.hf_config.n_layer` is given twice"],
    );
    fails_with(
        &[
            "run",
            "--model",
            "gpt2",
            "--workload",
            r#"{"batch":1,"batch":2}"#,
            "--seq-lens",
            "8",
            "--dry-run",
        ],
        None,
        1,
        &["--workload", "`batch` is given twice"],
    );
    let (_dir, path) = temp_file(
        "cases.jsonl",
        br#"{"case":"a","case":"b","model":"gpt2","workload":{"mode":"inference","seq_len":8},"measured":{"driver_peak":1000000000}}"#,
    );
    fails_with(&["check", &path], None, 1, &["`case` is given twice"]);
}

/// A pasted config with a misspelled key the importer reads is refused
/// from the command line too, naming the key it resembles.
#[test]
fn a_misspelled_config_key_is_refused_from_the_command_line() {
    fails_with(
        &["estimate"],
        Some(
            r#"{"model":{"hf_config":{"model_type":"llama","vocab_size":32000,"hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,"num_attention_heads":8,"num_key_value_head":2}},"workload":{"mode":"inference","seq_len":64}}"#,
        ),
        1,
        &[
            "`hf_config.num_key_value_head`",
            "did you mean `num_key_value_heads`?",
        ],
    );
}

/// Bidirectional overrides and invisible characters from a file are
/// printed escaped, as control characters are: a case name cannot make
/// its line read otherwise than it is.
#[test]
fn bidirectional_characters_from_files_are_printed_escaped() {
    let (_dir, path) = temp_file(
        "bidi.jsonl",
        "{\"case\":\"ok\u{202e}gnp.exe\u{200b}\",\"model\":\"gpt2\",\"workload\":{\"mode\":\"inference\",\"seq_len\":8},\"measured\":{\"driver_peak\":1000000000}}\n".as_bytes(),
    );
    let out = run(&["check", &path], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("ok\\u{202e}gnp.exe\\u{200b}"), "{shown}");
    assert!(
        !shown.contains('\u{202e}') && !shown.contains('\u{200b}'),
        "{shown}"
    );
}

/// A flag's value too large for its type is bad input (exit 1) naming the
/// value as typed, as a value out of its range is; an unknown flag is a
/// wrong command line (64).
#[test]
fn an_overflowing_flag_value_is_bad_input_like_an_out_of_range_one() {
    let huge = "99999999999999999999999";
    let out = run(
        &[
            "run",
            "--model",
            "gpt2",
            "--seq-lens",
            "8",
            "--timeout-s",
            huge,
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(huge), "{}", text(&out.stderr));
    let out = run(
        &[
            "run",
            "--model",
            "gpt2",
            "--seq-lens",
            "8",
            "--timeout-s",
            "604801",
            "--dry-run",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let out = run(&["estimate", "--no-such-flag"], None);
    assert_eq!(out.status.code(), Some(64));
}

/// Writing the answer: a closed pipe (`| head`) ends the command quietly
/// with 0, as command-line tools do; a full disk is its own exit code (74),
/// not "bad input".
#[test]
fn output_failures_have_their_own_exit_code_and_a_closed_pipe_is_quiet() {
    use std::process::{Command, Stdio};
    let spec = r#"{"model":"gpt2","workload":{"mode":"inference","seq_len":64}}"#;
    let (_dir, path) = temp_file("spec.json", spec.as_bytes());
    let bin = env!("CARGO_BIN_EXE_headroom");
    // The reader is gone before the answer is written.
    let mut child = Command::new(bin)
        .args(["gpus", &path])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    // A device that is always full.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(bin)
        .args(["estimate", &path])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("writing (standard output) failed"));
    let out = run(
        &["estimate", "--timeline", "/dev/full", "--force", &path],
        None,
    );
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("writing /dev/full failed"));
}

/// A JSON array of cases is read one element at a time: a file of more
/// empty objects than any measurement holds is refused at the cap, and a
/// non-object stops the read where it is, naming its index.
#[test]
fn a_huge_array_of_cases_is_refused_at_the_cap_without_holding_it() {
    let dir = tempfile::tempdir().unwrap();
    let many = dir.path().join("many.json");
    let cap = calibration_collector::cases::MAX_CASES_PER_FILE;
    let mut array = String::from("[");
    array.push_str(&"{},".repeat(cap + 10));
    array.push_str("{}]");
    std::fs::write(&many, &array).unwrap();
    let out = run(&["check", many.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("more than {cap} cases")), "{err}");

    let mixed = dir.path().join("mixed.json");
    std::fs::write(&mixed, "[{\"case\": \"a\"}, 7, {}]").unwrap();
    let out = run(&["check", mixed.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("mixed.json[1]") && err.contains("not a JSON object"),
        "{err}"
    );
}
