//! Helpers shared by the registry's tests: the real service binary on a real
//! SQLite file, and an HTTP client.
#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The committed profile every test varies.
pub fn committed_profile() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../calibration/profiles/h200-2026-11-30.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the committed profile"))
        .expect("the committed profile is JSON")
}

/// The committed profile under another `name` and `created` (seconds after
/// its own time): a distinct, valid profile.
pub fn profile(name: &str, seconds: u32) -> Value {
    let mut p = committed_profile();
    p["name"] = Value::String(name.to_string());
    p["created"] = Value::String(format!(
        "2026-11-30T{:02}:{:02}:{:02}Z",
        (6 + seconds / 3600) % 24,
        (seconds / 60) % 60,
        seconds % 60
    ));
    p
}

/// Runs `headroom-registry ARGS`: (exit code, stdout, stderr).
pub fn operator(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_headroom-registry"))
        .args(args)
        .output()
        .expect("the registry binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issues a token named `name` on `db` (`headroom-registry token add`).
pub fn add_token(db: &Path, name: &str) -> String {
    let (code, stdout, stderr) = operator(&[
        "token".as_ref(),
        "add".as_ref(),
        name.as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "token add: {stderr}");
    let token = stdout.trim().to_string();
    assert!(token.starts_with("hr_") && token.len() > 40, "{stdout}");
    token
}

/// `p` with its claims as the core recomputes them from its points (what
/// the registry stores).
pub fn recomputed(
    mut p: headroom_core::calibration::Profile,
) -> headroom_core::calibration::Profile {
    headroom_core::calibration::recompute(&p)
        .expect("the profile recomputes")
        .apply_to(&mut p);
    p
}

/// A running `headroom-registry`, killed (SIGKILL) when dropped.
pub struct Registry {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The database file.
    pub db: PathBuf,
    /// What it printed first.
    pub first_line: String,
}

impl Registry {
    /// Starts the built binary on `db` as `--open` (no token, no review),
    /// on a free port, and waits until it listens. `extra` are more flags
    /// (`--uploads-per-minute` defaults to 0 here: no limit, unless given).
    pub fn start(db: &Path, extra: &[&str]) -> Registry {
        let mut flags = vec!["--open"];
        flags.extend_from_slice(extra);
        Registry::start_with(db, &flags)
    }

    /// Starts the built binary on `db` as a community runs it: uploads need
    /// a token and wait for review.
    pub fn start_reviewed(db: &Path, extra: &[&str]) -> Registry {
        Registry::start_with(db, extra)
    }

    fn start_with(db: &Path, extra: &[&str]) -> Registry {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_headroom-registry"));
        cmd.arg("--db").arg(db).args(["--listen", "127.0.0.1:0"]);
        if !extra.contains(&"--uploads-per-minute") {
            cmd.args(["--uploads-per-minute", "0"]);
        }
        if !extra.contains(&"--dist") {
            cmd.arg("--dist").arg(db.with_extension("no-page"));
        }
        let mut child = cmd
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the registry binary starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep reading so the service never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the registry says where it listens");
        let base = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .map(|a| format!("http://{}", a.trim_end_matches('/')))
            .unwrap_or_else(|| panic!("no address in the registry's first line: {line:?}"));
        Registry {
            child,
            base,
            db: db.to_path_buf(),
            first_line: line,
        }
    }

    /// The upload URL.
    pub fn url(&self) -> String {
        format!("{}/api/v1/profiles", self.base)
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the process to exit: its status, if it did.
    pub fn wait_for_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.kill();
    }
}

pub mod http;

/// An HTTP client that returns every status as an answer.
pub fn agent() -> http::Agent {
    http::Agent {
        timeout: Duration::from_secs(60),
    }
}

/// An answer: status, headers (lower-case names) and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn answer(resp: Result<http::Response, String>) -> Result<Answer, String> {
    let resp = resp?;
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Ok(Answer {
        status: resp.status().as_u16(),
        headers,
        body: String::from_utf8_lossy(&resp.body).into_owned(),
    })
}

/// POSTs `body` as JSON (with an `Idempotency-Key` if given); `Err` is a
/// connection error.
pub fn try_post(
    agent: &http::Agent,
    url: &str,
    body: &[u8],
    key: Option<&str>,
) -> Result<Answer, String> {
    let mut req = agent.post(url).header("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    answer(req.send(body))
}

/// POSTs `body` as JSON with more headers.
pub fn post_with(agent: &http::Agent, url: &str, body: &[u8], headers: &[(&str, &str)]) -> Answer {
    let mut req = agent.post(url).header("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.header(k, v);
    }
    answer(req.send(body)).unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

pub fn post(agent: &http::Agent, url: &str, body: &[u8], key: Option<&str>) -> Answer {
    try_post(agent, url, body, key).unwrap_or_else(|e| panic!("POST {url}: {e}"))
}

pub fn get(agent: &http::Agent, url: &str) -> Answer {
    answer(agent.get(url).call()).unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// `PRAGMA integrity_check` of the database file.
pub fn integrity(db: &Path) -> String {
    let conn = rusqlite::Connection::open(db).expect("the database opens");
    let rows: Vec<String> = conn
        .prepare("PRAGMA integrity_check")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows.join("; ")
}

/// Every stored row: (id, name, gpu, points, body).
pub fn rows(db: &Path) -> Vec<(i64, String, String, i64, String)> {
    let conn = rusqlite::Connection::open(db).expect("the database opens");
    let mut stmt = conn
        .prepare("SELECT id, name, gpu, points, body FROM profiles ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// A stored body as the collector reads it (panics naming the row if it
/// does not validate).
pub fn check_row(id: i64, name: &str, gpu: &str, points: i64, body: &str) {
    let p = headroom_core::calibration::parse(body, &Default::default())
        .unwrap_or_else(|e| panic!("row {id} does not validate: {e}"));
    assert_eq!(p.name, name, "row {id}: name column");
    assert_eq!(p.gpu.name, gpu, "row {id}: gpu column");
    assert_eq!(p.points.len() as i64, points, "row {id}: points column");
}
