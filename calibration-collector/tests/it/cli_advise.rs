//! `gpus --advise`: what would make a job fit, after the table.

use crate::common;
use common::{run, text};

const ESMFOLD: &str = r#"{"model": "esmfold-v1", "workload": {"mode": "inference", "seq_len": 1024, "dtype": "fp32"}}"#;

#[test]
fn advice_for_a_named_card_lists_changes_that_fit_it() {
    let out = run(&["gpus", "--advise", "rtx-4090"], Some(ESMFOLD));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let advice = stdout
        .split("what would make it fit NVIDIA GeForce RTX 4090")
        .nth(1)
        .unwrap_or_else(|| panic!("no advice: {stdout}"));
    assert!(
        advice.contains("1. workload.esmfold.chunk_size: 256"),
        "{advice}"
    );
    assert!(advice.contains("costs slower folding"), "{advice}");
    // Each line's peak is within the card's usable memory.
    for line in advice
        .lines()
        .filter(|l| l.trim_start().starts_with(char::is_numeric))
    {
        let gb: f64 = line
            .split("peak ")
            .nth(1)
            .and_then(|t| t.split(" GB").next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!(gb < 25.38, "{line}");
    }
}

#[test]
fn advice_without_a_card_covers_every_card_that_does_not_fit() {
    let out = run(&["gpus", "--advise"], Some(ESMFOLD));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let not_fitting = stdout
        .lines()
        .filter(|l| l.starts_with("NVIDIA") || l.starts_with("AMD"))
        .filter(|l| l.split_whitespace().nth_back(0).is_some() && l.contains("  no "))
        .count();
    let advised = stdout.matches("what would make it fit").count();
    assert!(not_fitting > 0, "{stdout}");
    assert_eq!(advised, not_fitting, "{stdout}");
    // A card it fits: said so.
    let out = run(&["gpus", "--advise", "h200"], Some(ESMFOLD));
    assert!(
        text(&out.stdout).contains("it fits as it is"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn an_unknown_card_is_refused_naming_the_flag() {
    let out = run(&["gpus", "--advise", "rtx-9999"], Some(ESMFOLD));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--advise: unknown GPU `rtx-9999`; allowed: "),
        "{err}"
    );
    assert!(err.contains("h200"), "{err}");
}

/// A job that fits a card only because PyTorch frees its cache and retries
/// when a request fails (ResNet-18 at batch 704 on the RTX 3060: 15.2 GB
/// predicted when nothing is freed, 12.6 GB usable) is one job on that
/// card, not "fits, 0 jobs"; the page's table follows the same rule
/// (`search::jobs_on_card`).
#[test]
fn a_job_that_fits_only_by_freeing_the_cache_is_one_job() {
    const RESNET: &str = r#"{"model": "resnet-18", "workload": {"mode": "training", "batch": 704, "image_size": 224,
        "training": {"optimizer": "sgd", "momentum": 0.9, "precision": "amp_bf16", "steps": 3}}}"#;
    let out = run(&["gpus"], Some(RESNET));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("NVIDIA GeForce RTX 3060 12GB"))
        .unwrap_or_else(|| panic!("no RTX 3060 row: {stdout}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // name (5 words), usable (2), fits, jobs, ...
    assert_eq!(&cells[7..9], &["yes", "1"], "{row}");
    let request: f64 = stdout
        .split("request ")
        .nth(1)
        .and_then(|t| t.split(" GB").next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        request > 12.62,
        "the reservation exceeds the card: {request}"
    );
}

#[test]
fn a_card_is_named_as_people_name_it() {
    let spec = common::data("../../../examples/llama-8b-lora.json");
    let spec = spec.to_str().unwrap();
    let out = run(&["gpus", "--advise", "h100", spec], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("what would make it fit NVIDIA H100 80GB"));
    let out = run(&["estimate", "--gpu", "a100", spec], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("`a100` could be a100-40gb or a100-80gb"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn gpus_says_which_lengths_run_only_through_freeing_the_cache() {
    let spec = r#"{"model":"esmfold-v1","workload":{"mode":"inference","dtype":"fp32","seq_len":1200,
        "esmfold":{"stem_dtype":"fp16","chunk_size":64,"num_recycles":4}}}"#;
    let out = run(&["gpus", "-"], Some(spec));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("RTX 4090: seq_lens"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("run only if PyTorch frees its cache") && line.contains("runs without"),
        "{line}"
    );
}
