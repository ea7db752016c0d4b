//! `upload` against a local HTTP server: success, 5xx then success, permanent
//! failure (the file is untouched and the message says so), dry run.

mod common;

use common::{run_env, text, valid_profile};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::thread::JoinHandle;

#[derive(Debug, Clone)]
struct Request {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves one response per connection from `statuses`, then stops.
fn serve(statuses: Vec<u16>) -> (String, JoinHandle<Vec<Request>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api/v1/profiles", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for status in statuses {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            reader.read_line(&mut request_line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                let (k, v) = line.split_once(':').unwrap();
                headers.push((k.trim().to_string(), v.trim().to_string()));
            }
            let len: usize = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .unwrap_or(0);
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            seen.push(Request {
                request_line: request_line.trim_end().to_string(),
                headers,
                body,
            });
            let reply = match status {
                201 => r#"{"id": "h200-1", "url": "https://example.org/p/h200-1"}"#,
                422 => r#"{"error": "points[0].measured.driver_peak: implausible"}"#,
                _ => "try later",
            };
            let mut stream = stream;
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            )
            .unwrap();
            stream.flush().unwrap();
        }
        seen
    });
    (url, handle)
}

fn profile_file() -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h200.json");
    let bytes = serde_json::to_vec_pretty(&valid_profile()).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    (dir, path, bytes)
}

fn upload(path: &std::path::Path, url: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "upload",
        path.to_str().unwrap(),
        "--to",
        url,
        "--backoff-ms",
        "10",
        "--timeout-s",
        "5",
    ];
    args.extend_from_slice(extra);
    // A host name that appears nowhere in the profile.
    run_env(&args, None, &[("USER", "tester-xyz")])
}

#[test]
fn success_posts_the_validated_profile_as_json() {
    let (_dir, path, bytes) = profile_file();
    let (url, server) = serve(vec![201]);
    let out = upload(&path, &url, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = server.join().unwrap();
    assert_eq!(requests.len(), 1);
    let r = &requests[0];
    assert_eq!(r.request_line, "POST /api/v1/profiles HTTP/1.1");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r
        .header("user-agent")
        .unwrap()
        .starts_with("headroom-calibration-collector/"));
    assert_eq!(r.header("idempotency-key").unwrap().len(), 16);
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["schema_version"], 1);
    assert_eq!(
        body["runtime"]["cuda_context_bytes"],
        valid_profile()["runtime"]["cuda_context_bytes"]
    );
    // No paths, no user name, no host name in the payload.
    let payload = text(&r.body);
    assert!(!payload.contains(path.to_str().unwrap()));
    assert!(!payload.contains("tester-xyz"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    if host.trim().len() >= 3 {
        assert!(
            !payload.contains(host.trim()),
            "payload holds the host name"
        );
    }
    let outcome: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(outcome["status"], 201);
    assert_eq!(outcome["attempts"], 1);
    assert_eq!(outcome["response"]["id"], "h200-1");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the local file is untouched"
    );
}

#[test]
fn server_errors_are_retried_until_success() {
    let (_dir, path, bytes) = profile_file();
    let (url, server) = serve(vec![503, 500, 201]);
    let out = upload(&path, &url, &["--retries", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = server.join().unwrap();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[0].body, requests[2].body,
        "every attempt sends the same payload"
    );
    assert_eq!(
        requests[0].header("idempotency-key"),
        requests[2].header("idempotency-key")
    );
    let err = text(&out.stderr);
    assert!(
        err.contains("attempt 1/4 failed (HTTP 503")
            && err.contains("attempt 2/4 failed (HTTP 500"),
        "{err}"
    );
    assert!(text(&out.stdout).contains("HTTP 201 after 3 attempt(s)"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn permanent_failures_keep_the_file_and_say_so() {
    let (_dir, path, bytes) = profile_file();
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    // A 4xx is final: one attempt only.
    let (url, server) = serve(vec![422]);
    let out = upload(&path, &url, &[]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(server.join().unwrap().len(), 1);
    let err = text(&out.stderr);
    assert!(
        err.contains("rejected the profile (HTTP 422)") && err.contains("implausible"),
        "{err}"
    );
    assert!(err.contains("was not changed"), "{err}");
    // 5xx every time: gives up after the retries.
    let (url, server) = serve(vec![500, 502, 503]);
    let out = upload(&path, &url, &["--retries", "2"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(server.join().unwrap().len(), 3);
    let err = text(&out.stderr);
    assert!(
        err.contains("upload failed after 3 attempt(s)") && err.contains("was not changed"),
        "{err}"
    );
    // Nobody listening: connection errors are retried, then reported.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = upload(
        &path,
        &format!("http://127.0.0.1:{port}/x"),
        &["--retries", "1"],
    );
    assert_eq!(out.status.code(), Some(4));
    assert!(text(&out.stderr).contains("upload failed after 2 attempt(s)"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
}

#[test]
fn dry_run_shows_the_request_and_sends_nothing() {
    let (_dir, path, _) = profile_file();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/x");
    let out = upload(&path, &url, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with(&format!("POST {url}\nContent-Type: application/json\n")),
        "{shown}"
    );
    let body = &shown[shown.find("\n\n").unwrap() + 2..];
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["name"], valid_profile()["name"]);
}

#[test]
fn invalid_profiles_and_urls_are_bad_input() {
    let (dir, path, _) = profile_file();
    let out = upload(&path, "ftp://example.org", &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--to: `ftp://example.org` is not a URL"));
    let bad = dir.path().join("bad.json");
    let mut doc = valid_profile();
    doc["points"][0]["collector"] = serde_json::json!({"cmd": "python /home/x/job.py"});
    std::fs::write(&bad, serde_json::to_vec(&doc).unwrap()).unwrap();
    let out = upload(&bad, "http://127.0.0.1:9/x", &["--dry-run"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("bad.json") && err.contains("`points[0].collector`"),
        "{err}"
    );
    let out = upload(
        &dir.path().join("missing.json"),
        "http://127.0.0.1:9/x",
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
}
