//! `headroom upload` end to end against the running registry:
//! accepted (201), the same upload again is the same row (200), and a
//! profile the collector refuses never reaches it.
//!
//! The test runs the collector's binary: `HEADROOM_COLLECTOR_BIN` if set,
//! else the one cargo builds beside this test (built here, for this
//! profile, when it is missing or older than its sources).

use crate::common;

use common::{agent, get, integrity, rows, Registry};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// The newest modification time under `path`.
fn newest(path: &Path) -> SystemTime {
    let meta = std::fs::metadata(path).unwrap();
    let mut t = meta.modified().unwrap();
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            t = t.max(newest(&entry.unwrap().path()));
        }
    }
    t
}

fn collector() -> PathBuf {
    if let Ok(bin) = std::env::var("HEADROOM_COLLECTOR_BIN") {
        return PathBuf::from(bin);
    }
    // target/<profile>/deps/this-test -> target/<profile>/
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let bin = dir.join("headroom");
    // `cargo test --workspace` has just built it; alone, this test builds it
    // when it is missing or older than its sources.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources = [
        "calibration-collector/src",
        "calibration-collector/Cargo.toml",
        "core/src",
        "core/Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .map(|p| newest(&root.join(p)))
    .max()
    .unwrap();
    let fresh = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t >= sources);
    if !fresh {
        let mut build = Command::new(env!("CARGO"));
        build.current_dir(&root).args([
            "build",
            "--quiet",
            "-p",
            "calibration-collector",
            "--bin",
            "headroom",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building the collector failed");
    }
    bin
}

fn committed() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../calibration/profiles/h200-2026-11-30.json")
}

#[test]
fn collector_upload_lands_once() {
    let bin = collector();
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let file = committed();
    let before = std::fs::read(&file).unwrap();
    let upload = || {
        Command::new(&bin)
            .arg("upload")
            .arg(&file)
            .args(["--to", &reg.url(), "--json", "--retries", "0"])
            .output()
            .expect("the collector runs")
    };

    let first = upload();
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert!(
        first.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let outcome: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["status"], 201, "{outcome}");
    assert_eq!(outcome["attempts"], 1);
    let id = outcome["response"]["id"].as_i64().unwrap();
    assert_eq!(outcome["response"]["url"], format!("/api/v1/profiles/{id}"));

    // The same upload again (as a retry after a lost answer would be).
    let second = upload();
    assert!(second.status.success());
    let outcome: serde_json::Value =
        serde_json::from_str(&String::from_utf8_lossy(&second.stdout)).unwrap();
    assert_eq!(outcome["status"], 200, "{outcome}");
    assert_eq!(outcome["response"]["id"], id);
    assert_eq!(rows(&reg.db).len(), 1);

    // What is stored is what the collector sends, read back as a profile,
    // with its claims as the registry recomputed them.
    let a = agent();
    let stored = get(&a, &format!("{}/{id}", reg.url()));
    let stored = headroom_core::calibration::parse(&stored.body, &Default::default()).unwrap();
    let sent = common::recomputed(
        headroom_core::calibration::parse(
            &String::from_utf8(before.clone()).unwrap(),
            &Default::default(),
        )
        .unwrap(),
    );
    assert_eq!(stored, sent);
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "the file is only read"
    );

    // A profile the collector refuses is not sent at all (exit 1).
    let mut bad: serde_json::Value = serde_json::from_slice(&before).unwrap();
    bad["name"] = serde_json::json!("/home/someone/run.jsonl");
    let bad_file = dir.path().join("bad.json");
    std::fs::write(&bad_file, serde_json::to_vec(&bad).unwrap()).unwrap();
    let refused = Command::new(&bin)
        .arg("upload")
        .arg(&bad_file)
        .args(["--to", &reg.url(), "--retries", "0"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("name"));
    assert_eq!(rows(&reg.db).len(), 1);
    assert_eq!(integrity(&reg.db), "ok");
}

/// `headroom upload --token` (or `HEADROOM_TOKEN`) to a registry that takes
/// uploads with a token only: without one, a 401 the collector explains;
/// with one, stored pending; the token never printed.
#[test]
fn collector_upload_with_a_token_waits_for_review() {
    let bin = collector();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.sqlite");
    let reg = Registry::start_reviewed(&db, &[]);
    let token = common::add_token(&db, "lab-1");
    let file = committed();
    let upload = |token_flag: Option<&str>, env: Option<&str>| {
        let mut cmd = Command::new(&bin);
        cmd.arg("upload")
            .arg(&file)
            .args(["--to", &reg.url(), "--json", "--retries", "0"])
            .env_remove("HEADROOM_TOKEN");
        if let Some(t) = token_flag {
            cmd.args(["--token", t]);
        }
        if let Some(t) = env {
            cmd.env("HEADROOM_TOKEN", t);
        }
        cmd.output().expect("the collector runs")
    };

    // Refused by the server: an upload failure (exit 4).
    let without = upload(None, None);
    assert_eq!(without.status.code(), Some(4));
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(err.contains("401") && err.contains("--token"), "{err}");

    let wrong = upload(Some("hr_not-a-token-of-this-registry"), None);
    assert_eq!(wrong.status.code(), Some(4));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !err.contains("hr_not-a-token"),
        "the token was printed: {err}"
    );

    let with_env = upload(None, Some(&token));
    let stdout = String::from_utf8_lossy(&with_env.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&with_env.stderr).into_owned();
    assert!(with_env.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(&token) && !stderr.contains(&token),
        "the token was printed"
    );
    let outcome: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["status"], 201, "{outcome}");
    assert_eq!(outcome["response"]["status"], "pending");
    let with_flag = upload(Some(&token), None);
    assert!(with_flag.status.success());
    let outcome: serde_json::Value = serde_json::from_slice(&with_flag.stdout).unwrap();
    assert_eq!(outcome["status"], 200, "the same profile: the same row");
    assert_eq!(rows(&reg.db).len(), 1);

    let dry = Command::new(&bin)
        .arg("upload")
        .arg(&file)
        .args(["--to", &reg.url(), "--dry-run", "--token", &token])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&dry.stdout);
    assert!(shown.contains("Authorization: Bearer ***"), "{shown}");
    assert!(!shown.contains(&token));
}
