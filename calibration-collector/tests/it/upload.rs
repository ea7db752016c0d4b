//! `upload` against a local HTTP server: success, 5xx then success, permanent
//! failure (the file is untouched and the message says so), dry run.

use crate::common;

use common::{run_env, text, valid_profile};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

/// One answer of the test server.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn status(status: u16) -> Reply {
        let body = match status {
            201 => r#"{"id": "h200-1", "url": "https://example.org/p/h200-1"}"#,
            422 => r#"{"error": "points[0].measured.driver_peak: implausible"}"#,
            _ => "try later",
        };
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.as_bytes().to_vec(),
        }
    }

    fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Reply {
        self.body = body.into();
        self
    }
}

/// A local HTTP server answering one connection per reply, in order.
struct Server {
    /// The upload URL (`/api/v1/profiles`).
    url: String,
    /// `http://127.0.0.1:PORT`.
    base: String,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<Request>>,
}

impl Server {
    /// The requests it saw, once the connections already made are answered.
    fn finish(self) -> Vec<Request> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap()
    }
}

fn serve(statuses: Vec<u16>) -> Server {
    serve_replies(statuses.into_iter().map(Reply::status).collect())
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        request_line: request_line.trim_end().to_string(),
        headers,
        body,
    })
}

/// Serves `replies`, one per connection (`{base}` in a header value is the
/// server's own `http://127.0.0.1:PORT`); stops when they are used up or,
/// after [`Server::finish`], when no connection is waiting.
fn serve_replies(replies: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let base_url = base.clone();
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for reply in replies {
            let stream = loop {
                match listener.accept() {
                    Ok((stream, _)) => break Some(stream),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if stopped.load(Ordering::SeqCst) {
                            break None;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            let Some(mut stream) = stream else { break };
            stream.set_nonblocking(false).unwrap();
            let Some(request) = read_request(&stream) else {
                continue;
            };
            seen.push(request);
            let mut head = format!("HTTP/1.1 {} X\r\n", reply.status);
            for (k, v) in &reply.headers {
                let v = v.replace("{base}", &base_url);
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                reply.body.len()
            ));
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&reply.body);
            let _ = stream.flush();
        }
        seen
    });
    Server {
        url: format!("{base}/api/v1/profiles"),
        base,
        stop,
        handle,
    }
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
    let server = serve(vec![201]);
    let out = upload(&path, &server.url, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = server.finish();
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
    let server = serve(vec![503, 500, 201]);
    let out = upload(&path, &server.url, &["--retries", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let requests = server.finish();
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
    let server = serve(vec![422]);
    let out = upload(&path, &server.url, &[]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(server.finish().len(), 1);
    let err = text(&out.stderr);
    assert!(
        err.contains("rejected the profile (HTTP 422)") && err.contains("implausible"),
        "{err}"
    );
    assert!(err.contains("was not changed"), "{err}");
    // 5xx every time: gives up after the retries.
    let server = serve(vec![500, 502, 503]);
    let out = upload(&path, &server.url, &["--retries", "2"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(server.finish().len(), 3);
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

/// A port nobody listens on.
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn redirects_are_not_followed_and_name_the_new_location() {
    let (_dir, path, bytes) = profile_file();
    for status in [301, 302, 303, 307, 308] {
        // Were the redirect followed, the second reply would accept it.
        let server = serve_replies(vec![
            Reply::status(status).header("Location", "{base}/elsewhere"),
            Reply::status(201),
        ]);
        let location = format!("{}/elsewhere", server.base);
        let out = upload(&path, &server.url, &[]);
        let requests = server.finish();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "HTTP {status}: {err}");
        assert_eq!(requests.len(), 1, "HTTP {status}: one POST, no follow-up");
        assert!(requests[0].request_line.starts_with("POST "));
        assert!(
            err.contains(&format!("HTTP {status}"))
                && err.contains("redirect")
                && err.contains(&location)
                && err.contains("was not changed"),
            "HTTP {status}: {err}"
        );
        assert!(out.stdout.is_empty(), "nothing reported as uploaded");
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn out_of_range_timeouts_and_retries_are_bad_input() {
    let (_dir, path, _) = profile_file();
    let url = format!("http://127.0.0.1:{}/x", dead_port());
    for (flag, value, allowed) in [
        ("--timeout-s", "9223372036854775807", "allowed: 1 to 600"),
        ("--timeout-s", "18446744073709551615", "allowed: 1 to 600"),
        ("--timeout-s", "0", "allowed: 1 to 600"),
        ("--timeout-s", "601", "allowed: 1 to 600"),
        ("--retries", "4294967295", "allowed: 0 to 20"),
        ("--retries", "99999999999999999999999", "allowed: 0 to 20"),
        ("--retries", "21", "allowed: 0 to 20"),
        ("--backoff-ms", "60001", "allowed: 0 to 60000"),
        (
            "--backoff-ms",
            "99999999999999999999999",
            "allowed: 0 to 60000",
        ),
    ] {
        let out = run_env(
            &["upload", path.to_str().unwrap(), "--to", &url, flag, value],
            None,
            &[("USER", "tester-xyz")],
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag} {value}: {err}");
        // Named with its range, as typed (never another number).
        assert!(
            err.contains(flag) && err.contains(allowed) && err.contains(value),
            "{flag} {value}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // The bounds themselves are accepted.
    let bounds = |extra: &[&str]| {
        let mut args = vec!["upload", path.to_str().unwrap(), "--to", &url];
        args.extend_from_slice(extra);
        run_env(&args, None, &[("USER", "tester-xyz")])
    };
    let out = bounds(&["--timeout-s", "600", "--retries", "20", "--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = bounds(&["--timeout-s", "1", "--retries", "0"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("upload failed after 1 attempt(s)"));
}

#[test]
fn credentials_in_the_url_are_never_shown() {
    let (_dir, path, _) = profile_file();
    let secret = "s3cret-Pa55";
    let hidden = |out: &std::process::Output| {
        let all = text(&out.stdout) + &text(&out.stderr);
        assert!(
            !all.contains(secret) && !all.contains("alice:"),
            "credentials shown: {all}"
        );
        all
    };
    // Dry run.
    let port = dead_port();
    let url = format!("http://alice:{secret}@127.0.0.1:{port}/x");
    let out = upload(&path, &url, &["--dry-run"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = hidden(&out);
    assert!(
        shown.starts_with(&format!("POST http://***@127.0.0.1:{port}/x\n")),
        "{shown}"
    );
    // Accepted, as JSON and as text; the credentials travel as Basic auth.
    for extra in [&["--json"][..], &[][..]] {
        let server = serve(vec![201]);
        let url = server
            .url
            .replace("http://", &format!("http://alice:{secret}@"));
        let out = upload(&path, &url, extra);
        let requests = server.finish();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let shown = hidden(&out);
        assert!(shown.contains("http://***@127.0.0.1:"), "{shown}");
        assert!(requests[0]
            .header("authorization")
            .is_some_and(|a| a.starts_with("Basic ")));
    }
    // Rejected, unreachable, malformed.
    let server = serve(vec![422]);
    let url = server
        .url
        .replace("http://", &format!("http://alice:{secret}@"));
    let out = upload(&path, &url, &[]);
    server.finish();
    assert_eq!(out.status.code(), Some(4));
    hidden(&out);
    let out = upload(
        &path,
        &format!("http://alice:{secret}@127.0.0.1:{}/x", dead_port()),
        &["--retries", "1"],
    );
    assert_eq!(out.status.code(), Some(4));
    hidden(&out);
    for bad in [
        format!("http://alice:{secret}@"),
        format!("ftp://alice:{secret}@example.org/x"),
        format!("http://alice:{secret}@exa mple.org/x"),
    ] {
        let out = upload(&path, &bad, &[]);
        assert_eq!(out.status.code(), Some(1), "{bad}");
        let shown = hidden(&out);
        assert!(shown.contains("***@"), "{shown}");
    }
}

#[test]
fn malformed_urls_are_refused_at_once() {
    let (_dir, path, _) = profile_file();
    for bad in [
        "http://",
        "https://",
        "http:/x",
        "http:x",
        "ftp://x",
        "not a url",
        "http://:8080/x",
        "http://host:99999/x",
        "http://host:port/x",
        "http://exa mple.org/x",
        "http://[::1/x",
        "//example.org/x",
    ] {
        let started = Instant::now();
        // Default backoff: a URL retried as if the network failed takes 15 s.
        let out = run_env(
            &["upload", path.to_str().unwrap(), "--to", bad],
            None,
            &[("USER", "tester-xyz")],
        );
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(
            err.contains("--to: ") && err.contains("allowed: http(s)://host[:port]/path"),
            "{bad}: {err}"
        );
        assert!(!err.contains("attempt"), "{bad}: {err}");
        assert!(started.elapsed() < Duration::from_secs(5), "{bad}");
    }
    // Well-formed URLs pass the check (nothing is sent in a dry run).
    for good in [
        "https://example.org/api/v1/profiles",
        "http://127.0.0.1:8080/x",
        "http://[::1]:8080/x?token=abc",
        "https://example.org",
        "HTTPS://Example.org/x",
    ] {
        let out = upload(&path, good, &["--dry-run"]);
        assert_eq!(out.status.code(), Some(0), "{good}: {}", text(&out.stderr));
    }
}

#[test]
fn server_text_is_escaped_and_cut() {
    let (_dir, path, _) = profile_file();
    let hostile = format!(
        "\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\r\nfake: uploaded\u{202e} {}",
        "A".repeat(10_000)
    );
    let check = |out: &std::process::Output| {
        let all = text(&out.stdout) + &text(&out.stderr);
        for c in ['\u{1b}', '\u{7}', '\u{9b}', '\r', '\u{202e}'] {
            assert!(!all.contains(c), "raw {:?} printed: {all:?}", c);
        }
        all
    };
    // Rejected: the server's message, escaped and cut.
    let server = serve_replies(vec![Reply::status(422)
        .body(hostile.clone())
        .header("Content-Type", "text/plain")]);
    let out = upload(&path, &server.url, &[]);
    server.finish();
    assert_eq!(out.status.code(), Some(4));
    let err = check(&out);
    assert!(err.contains("\\u{1b}[2J"), "{err}");
    assert!(err.contains("cut"), "{err}");
    assert!(err.len() < 4_000, "{} bytes printed", err.len());
    // Retried: the same for each attempt's message.
    let server = serve_replies(vec![
        Reply::status(503).body(hostile.clone()),
        Reply::status(503).body(hostile.clone()),
    ]);
    let out = upload(&path, &server.url, &["--retries", "1"]);
    server.finish();
    assert_eq!(out.status.code(), Some(4));
    let err = check(&out);
    assert!(err.len() < 8_000, "{} bytes printed", err.len());
    // Accepted with a hostile answer: text and JSON output stay inert.
    // Valid JSON whose strings decode to control characters.
    let json_answer = r#"{"id": "\u009b2J\u001b[31m", "\u202ek": 1}"#;
    for (body, extra) in [
        (hostile.as_str(), &[][..]),
        (hostile.as_str(), &["--json"][..]),
        (json_answer, &[][..]),
        (json_answer, &["--json"][..]),
    ] {
        let server = serve_replies(vec![Reply::status(201).body(body)]);
        let out = upload(&path, &server.url, extra);
        server.finish();
        // Only the registry's JSON answer is a success.
        let want = if body == json_answer { 0 } else { 4 };
        assert_eq!(out.status.code(), Some(want), "{}", text(&out.stderr));
        let all = check(&out);
        assert!(all.len() < 4_000, "{} bytes printed", all.len());
        if extra == ["--json"] && want == 0 {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["status"], 201);
        }
    }
}

/// Runs the binary with stdin from `stdin` (or nothing), at most 2 GiB of
/// address space and `secs` of wall time: (exit code, stderr, time taken);
/// the code is `None` when it was killed or died of a signal.
fn run_bounded(
    args: &[&str],
    stdin: Option<std::fs::File>,
    secs: u64,
) -> (Option<i32>, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" \"$@\"")
        .arg(common::bin())
        .args(args)
        .env("USER", "tester-xyz")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .stdin(match stdin {
            Some(f) => std::process::Stdio::from(f),
            None => std::process::Stdio::null(),
        });
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    (code, err, started.elapsed())
}

#[test]
fn oversized_and_endless_profiles_fail_fast() {
    let dir = tempfile::tempdir().unwrap();
    let limit = (16u64 << 20).to_string();
    // A file over the limit: refused from its size, before reading.
    let big = dir.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(17 << 20)
        .unwrap();
    let (code, err, _) = run_bounded(
        &[
            "upload",
            big.to_str().unwrap(),
            "--to",
            "http://127.0.0.1:9/x",
            "--dry-run",
        ],
        None,
        30,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("big.json")
            && err.contains(&(17u64 << 20).to_string())
            && err.contains(&limit),
        "{err}"
    );
    // Devices that never end: reading stops at the limit (text) or at the
    // first byte that is not text (binary).
    for (device, why) in [
        ("/dev/zero", limit.as_str()),
        ("/dev/urandom", "not UTF-8 text"),
    ] {
        let (code, err, took) = run_bounded(
            &[
                "upload",
                device,
                "--to",
                "http://127.0.0.1:9/x",
                "--dry-run",
            ],
            None,
            30,
        );
        assert_eq!(code, Some(1), "{device} ({took:?}): {err}");
        assert!(
            err.contains(device) && err.contains(why) && !err.contains("panicked"),
            "{err}"
        );
        assert!(took < Duration::from_secs(10), "{device}: {took:?}");
    }
    // Standard input over the limit.
    let (code, err, _) = run_bounded(
        &["upload", "-", "--to", "http://127.0.0.1:9/x", "--dry-run"],
        Some(std::fs::File::open(&big).unwrap()),
        30,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&limit), "{err}");
}

/// A 200, 201 or 202 is a success only with the registry's answer, a JSON
/// object with the stored profile's `id`: an HTML page (a proxy's login, a
/// static site), an empty body or JSON without an id exit 4 and say the
/// profile may not be stored.
#[test]
fn an_answer_that_is_not_the_registrys_is_not_a_success() {
    let (_dir, path, _) = profile_file();
    for (status, body) in [
        (200, "<html><body>Welcome</body></html>"),
        (201, ""),
        (202, r#"{"ok": true}"#),
        (200, r#"{"id": ""}"#),
    ] {
        let server = serve_replies(vec![Reply::status(status).body(body)]);
        let out = upload(&path, &server.url, &[]);
        server.finish();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{status} {body:?}: {err}");
        assert!(err.contains("not as a profile registry does"), "{err}");
        assert!(err.contains("may not be stored"), "{err}");
    }
}

/// `--to https://` on a plain-HTTP port fails at once with a word of TLS,
/// not after every retry with the TLS library's words alone.
#[test]
fn https_to_a_plain_http_port_says_so_and_is_not_retried() {
    let (_dir, path, _) = profile_file();
    let server = serve_replies(vec![Reply::status(201)]);
    let url = server.url.replacen("http://", "https://", 1);
    let out = upload(&path, &url, &["--retries", "3"]);
    drop(server);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("TLS handshake") && err.contains("plain-HTTP port"),
        "{err}"
    );
    assert!(!err.contains("attempt 2/"), "retried: {err}");
}
