//! The API against the real service on a real SQLite file: uploads and
//! their idempotency, the listing, hostile bodies, the rate limit, CORS and
//! the page.

use crate::common;

use common::{agent, check_row, get, integrity, post, profile, rows, Registry};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

#[test]
fn the_committed_profile_still_validates() {
    let p = common::committed_profile();
    headroom_core::calibration::from_value(&p, &Default::default())
        .expect("calibration/profiles/h200-2026-11-30.json validates");
    headroom_core::calibration::from_value(&profile("varied", 4000), &Default::default())
        .expect("a varied copy validates");
}

#[test]
fn upload_list_fetch_and_idempotency() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let a = agent();
    let url = reg.url();

    let first = body(&profile("first H200 profile", 1));
    let created = post(&a, &url, &first, Some("0123456789abcdef"));
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.json()["id"].as_i64().unwrap();
    assert_eq!(created.json()["url"], format!("/api/v1/profiles/{id}"));
    assert_eq!(
        created.header("location"),
        Some(&*format!("/api/v1/profiles/{id}"))
    );

    // The same upload retried: the same row.
    let again = post(&a, &url, &first, Some("0123456789abcdef"));
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.json()["id"], id);
    // The same key with another profile: a conflict naming the header.
    let other = body(&profile("another profile", 2));
    let conflict = post(&a, &url, &other, Some("0123456789abcdef"));
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    assert_eq!(conflict.json()["field"], "Idempotency-Key");
    // Without a key, a new profile is a new row and the same profile again
    // is the row stored before (one row per identical profile).
    let without_key = post(&a, &url, &other, None);
    assert_eq!(without_key.status, 201);
    let same_again = post(&a, &url, &other, None);
    assert_eq!(same_again.status, 200, "{}", same_again.body);
    assert_eq!(same_again.json()["id"], without_key.json()["id"]);
    assert_eq!(
        post(&a, &url, &body(&profile("a third", 4)), None).status,
        201
    );
    let mut rtx = profile("an RTX 4090 profile", 3);
    rtx["gpu"]["name"] = json!("NVIDIA GeForce RTX 4090");
    let rtx_id = post(&a, &url, &body(&rtx), Some("rtx")).json()["id"]
        .as_i64()
        .unwrap();
    assert_eq!(rows(&reg.db).len(), 4);

    // One profile: the document as the schema writes it.
    let one = get(&a, &format!("{url}/{id}"));
    assert_eq!(one.status, 200);
    assert!(one
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let stored = headroom_core::calibration::parse(&one.body, &Default::default()).unwrap();
    let sent = common::recomputed(
        headroom_core::calibration::from_value(
            &profile("first H200 profile", 1),
            &Default::default(),
        )
        .unwrap(),
    );
    assert_eq!(stored, sent);

    // The listing: newest first, the facts a picker needs.
    let list = get(&a, &url).json();
    assert_eq!(list["total"], 4);
    let entries = list["profiles"].as_array().unwrap();
    assert_eq!(entries[0]["id"], rtx_id);
    let e = entries.iter().find(|e| e["id"] == id).unwrap();
    assert_eq!(e["name"], "first H200 profile");
    assert_eq!(e["gpu"], "NVIDIA H200");
    assert_eq!(e["driver"], "580.159.04");
    assert_eq!(e["torch"], "2.11.0+cu130");
    assert_eq!(e["cuda"], "13.0");
    assert_eq!(e["points"], 5);
    assert_eq!(e["created"], "2026-11-30T06:00:01Z");
    assert_eq!(e["fit"]["basis"], "torch_reserved");
    assert!(e["summary"]["after"]["median_abs_err"].as_f64().unwrap() < 0.01);
    assert_eq!(e["url"], format!("/api/v1/profiles/{id}"));

    // The gpu filter (case-insensitive, part of the name), paging.
    let h200 = get(&a, &format!("{url}?gpu=h200")).json();
    assert_eq!(h200["total"], 3);
    assert!(h200["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["gpu"] == "NVIDIA H200"));
    let rtx_list = get(&a, &format!("{url}?gpu=RTX%204090")).json();
    assert_eq!(rtx_list["total"], 1);
    assert_eq!(get(&a, &format!("{url}?gpu=b200")).json()["total"], 0);
    let page = get(&a, &format!("{url}?limit=2&offset=1")).json();
    assert_eq!(page["profiles"].as_array().unwrap().len(), 2);
    assert_eq!(page["total"], 4);
    for (q, field) in [
        ("limit=lots", "limit"),
        ("gpus=h200", "gpus"),
        ("offset=-3", "offset"),
    ] {
        let bad = get(&a, &format!("{url}?{q}"));
        assert_eq!(bad.status, 400, "{q}: {}", bad.body);
        assert_eq!(bad.json()["field"], field, "{q}");
    }

    // Absent profiles and endpoints: JSON 404s.
    for missing in ["999", "0", "abc", "-1", "1e3"] {
        let nf = get(&a, &format!("{url}/{missing}"));
        assert_eq!(nf.status, 404, "{missing}");
        assert_eq!(nf.json()["field"], "id");
        assert!(nf.json()["error"].as_str().unwrap().contains("no profile"));
    }
    let nf = get(&a, &format!("{}/api/v2/profiles", reg.base));
    assert_eq!(nf.status, 404);
    assert!(nf.json()["error"].is_string());
    let health = get(&a, &format!("{}/api/v1/health", reg.base)).json();
    assert_eq!(health, json!({"status": "ok", "profiles": 4, "pending": 0}));

    for (id, name, gpu, points, body) in rows(&reg.db) {
        check_row(id, &name, &gpu, points, &body);
    }
    assert_eq!(integrity(&reg.db), "ok");
}

/// Sends `body` and checks a 4xx JSON error naming `field`.
fn refused(a: &common::http::Agent, url: &str, what: &str, body: &[u8], status: u16, field: &str) {
    let ans = post(a, url, body, None);
    assert_eq!(ans.status, status, "{what}: {}", ans.body);
    let v = ans.json();
    assert_eq!(v["field"], field, "{what}: {v}");
    assert!(
        v["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{what}: {v}"
    );
}

fn with(path: &[&str], value: Value) -> Vec<u8> {
    let mut p = profile("hostile", 7);
    let mut at = &mut p;
    for key in &path[..path.len() - 1] {
        at = match key.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*key],
        };
    }
    let last = path[path.len() - 1];
    match last.parse::<usize>() {
        Ok(i) => at[i] = value,
        Err(_) => at[last] = value,
    }
    body(&p)
}

#[test]
fn hostile_bodies_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let a = agent();
    let url = reg.url();
    let good = body(&profile("hostile", 7));

    // Size: over 1 MiB, declared and streamed.
    let mut big = good.clone();
    big.pop();
    big.extend(std::iter::repeat_n(b' ', 1 << 20));
    big.push(b'}');
    refused(&a, &url, "oversized", &big, 413, "(document)");
    // Shape of the document.
    refused(
        &a,
        &url,
        "truncated",
        &good[..good.len() / 2],
        400,
        "(document)",
    );
    refused(&a, &url, "empty", b"", 400, "(document)");
    refused(
        &a,
        &url,
        "not UTF-8",
        b"{\"name\": \"\xff\xfe\"}",
        400,
        "(document)",
    );
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    refused(
        &a,
        &url,
        "deeply nested",
        deep.as_bytes(),
        400,
        "(document)",
    );
    let mut nested = profile("nested", 8);
    nested["gpu"]["name"] = json!({"a": {"b": {"c": [[[[[1]]]]]}}});
    refused(
        &a,
        &url,
        "object for a name",
        &body(&nested),
        422,
        "gpu.name",
    );
    refused(&a, &url, "a list", b"[]", 422, "(document)");
    refused(&a, &url, "null", b"null", 422, "(document)");
    // Wrong types.
    refused(
        &a,
        &url,
        "string bytes",
        &with(&["gpu", "total_bytes"], json!("lots")),
        422,
        "gpu.total_bytes",
    );
    refused(
        &a,
        &url,
        "number name",
        &with(&["name"], json!(5)),
        422,
        "name",
    );
    refused(
        &a,
        &url,
        "points object",
        &with(&["points"], json!({})),
        422,
        "points",
    );
    refused(
        &a,
        &url,
        "unknown field",
        &with(&["uploader"], json!("me")),
        422,
        "uploader",
    );
    refused(
        &a,
        &url,
        "unknown nested field",
        &with(&["points", "0", "measured", "hostname"], json!("x")),
        422,
        "points[0].measured.hostname",
    );
    // Numbers out of range.
    refused(
        &a,
        &url,
        "negative",
        &with(&["gpu", "total_bytes"], json!(-1)),
        422,
        "gpu.total_bytes",
    );
    refused(
        &a,
        &url,
        "float bytes",
        &with(&["gpu", "total_bytes"], json!(1e300)),
        422,
        "gpu.total_bytes",
    );
    refused(
        &a,
        &url,
        "2^64",
        b"{\"schema_version\": 18446744073709551616}",
        422,
        "schema_version",
    );
    refused(
        &a,
        &url,
        "schema 2",
        &with(&["schema_version"], json!(2)),
        422,
        "schema_version",
    );
    refused(
        &a,
        &url,
        "absurd peak",
        &with(
            &["points", "0", "measured", "driver_peak"],
            json!(1_000_000_000_000_000u64),
        ),
        422,
        "points[0].measured.driver_peak",
    );
    refused(
        &a,
        &url,
        "absurd coefficient",
        &with(&["runtime", "cuda_context_bytes"], json!(1u64 << 40)),
        422,
        "runtime.cuda_context_bytes",
    );
    refused(
        &a,
        &url,
        "error fraction",
        &with(&["summary", "after", "median_abs_err"], json!(1e9)),
        422,
        "summary.after.median_abs_err",
    );
    refused(
        &a,
        &url,
        "date",
        &with(&["created"], json!("yesterday")),
        422,
        "created",
    );
    // What the collector refuses to send.
    refused(
        &a,
        &url,
        "a path",
        &with(&["name"], json!("/home/alice/run.jsonl")),
        422,
        "name",
    );
    refused(
        &a,
        &url,
        "an address",
        &with(&["torch"], json!("alice@example.org")),
        422,
        "torch",
    );
    refused(
        &a,
        &url,
        "control characters",
        &with(&["name"], json!("a\u{1b}[2Jb")),
        422,
        "name",
    );
    refused(
        &a,
        &url,
        "script in a name",
        &with(&["name"], json!("<script>alert(1)</script>")),
        422,
        "name",
    );
    // SQL in a number's place is a type error; in a version, not a version.
    refused(
        &a,
        &url,
        "SQL for a number",
        &with(&["gpu", "total_bytes"], json!("1; DROP TABLE profiles")),
        422,
        "gpu.total_bytes",
    );
    refused(
        &a,
        &url,
        "SQL for a version",
        &with(&["driver"], json!("1' OR '1'='1")),
        422,
        "driver",
    );
    // Headers.
    let wrong_type = a
        .post(&url)
        .header("Content-Type", "text/plain")
        .send(&good[..]);
    let wrong_type = wrong_type.unwrap();
    assert_eq!(wrong_type.status().as_u16(), 415);
    let bad_key = post(&a, &url, &good, Some("has spaces in it"));
    assert_eq!(bad_key.status, 400);
    assert_eq!(bad_key.json()["field"], "Idempotency-Key");

    // Nothing refused was stored, and the service answers.
    assert!(rows(&reg.db).is_empty());
    let health = get(&a, &format!("{}/api/v1/health", reg.base));
    assert_eq!(health.json()["profiles"], 0);

    // Text the schema allows is data: SQL and markup stored as they were
    // sent, the table intact, markup never served as markup.
    let sql = "x'); DROP TABLE profiles; --";
    let markup = "<img src=x onerror=alert(1)> & co";
    let mut ids = Vec::new();
    for (i, name) in [sql, markup].into_iter().enumerate() {
        let ans = post(
            &a,
            &url,
            &with(&["name"], json!(name)),
            Some(&format!("k{i}")),
        );
        assert_eq!(ans.status, 201, "{name}: {}", ans.body);
        ids.push(ans.json()["id"].as_i64().unwrap());
    }
    let one = get(&a, &format!("{url}/{}", ids[1]));
    assert!(one
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    assert_eq!(one.header("x-content-type-options"), Some("nosniff"));
    assert!(
        !one.body.contains('<') && !one.body.contains('&'),
        "markup escaped in the JSON"
    );
    assert_eq!(one.json()["name"], markup);
    let list = get(&a, &url);
    assert!(!list.body.contains('<'));
    let names: Vec<String> = rows(&reg.db).into_iter().map(|r| r.1).collect();
    assert_eq!(names, [sql, markup]);
    assert_eq!(integrity(&reg.db), "ok");
}

/// Raw HTTP: what a client library would not send. `cut`: the request
/// ends there (the client shuts its side), else the server closes after
/// answering (`Connection: close` is the request's to ask).
fn raw(base: &str, request: &[u8], cut: bool) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    if cut {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn raw_requests_chunked_oversized_and_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let head = "POST /api/v1/profiles HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n";
    // Chunked, no length announced: 2 MiB in 64 KiB chunks.
    let mut req = format!("{head}Transfer-Encoding: chunked\r\n\r\n").into_bytes();
    for _ in 0..32 {
        req.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        req.extend(std::iter::repeat_n(b' ', 65536));
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let ans = raw(&reg.base, &req, false);
    assert!(ans.starts_with("HTTP/1.1 413"), "{ans}");
    assert!(ans.contains("\"field\":\"(document)\""), "{ans}");
    // A body cut short of its Content-Length.
    let ans = raw(
        &reg.base,
        format!("{head}Content-Length: 5000\r\n\r\n{{\"schema_version\": 1,").as_bytes(),
        true,
    );
    assert!(ans.is_empty() || ans.starts_with("HTTP/1.1 400"), "{ans}");
    // A declared length over the limit is refused before reading it.
    let ans = raw(
        &reg.base,
        format!("{head}Content-Length: 999999999999\r\n\r\n{{}}").as_bytes(),
        false,
    );
    assert!(ans.starts_with("HTTP/1.1 413"), "{ans}");
    // Garbage.
    let ans = raw(&reg.base, b"\x00\x01\x02 not http\r\n\r\n", true);
    assert!(ans.is_empty() || ans.starts_with("HTTP/1.1 400"), "{ans}");
    let a = agent();
    assert_eq!(get(&a, &format!("{}/api/v1/health", reg.base)).status, 200);
    assert!(rows(&reg.db).is_empty());
    assert_eq!(integrity(&reg.db), "ok");
}

#[test]
fn uploads_are_rate_limited_per_address() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &["--uploads-per-minute", "3"]);
    let a = agent();
    let url = reg.url();
    for i in 0..3 {
        let ans = post(&a, &url, &body(&profile(&format!("rate {i}"), i)), None);
        assert_eq!(ans.status, 201, "{}", ans.body);
    }
    let limited = post(&a, &url, &body(&profile("rate 3", 3)), None);
    assert_eq!(limited.status, 429, "{}", limited.body);
    let wait: u64 = limited.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=20).contains(&wait), "Retry-After: {wait}");
    assert!(limited.json()["error"]
        .as_str()
        .unwrap()
        .contains("too many uploads"));
    assert!(limited.json()["field"].is_null());
    // Reading is not limited; nothing about the client is stored.
    assert_eq!(get(&a, &url).json()["total"], 3);
    let conn = rusqlite::Connection::open(&reg.db).unwrap();
    let dump: Vec<String> = conn
        .prepare("SELECT quote(idempotency_key) || name || gpu || body FROM profiles")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(dump.iter().all(|row| !row.contains("127.0.0.1")));
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('profiles')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(!columns
        .iter()
        .any(|c| c.contains("ip") || c.contains("addr") || c.contains("agent")));
}

#[test]
fn cors_page_and_methods() {
    let dir = tempfile::tempdir().unwrap();
    let dist = dir.path().join("dist");
    std::fs::create_dir(&dist).unwrap();
    std::fs::write(
        dist.join("index.html"),
        "<!DOCTYPE html><title>headroom</title>",
    )
    .unwrap();
    std::fs::write(dist.join("app_bg.wasm"), b"\0asm").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "not served").unwrap();
    let reg = Registry::start(
        &dir.path().join("r.sqlite"),
        &["--dist", dist.to_str().unwrap()],
    );
    let a = agent();
    let url = reg.url();

    let page = get(&a, &format!("{}/", reg.base));
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<title>headroom</title>"));
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let wasm = get(&a, &format!("{}/app_bg.wasm", reg.base));
    assert_eq!(wasm.header("content-type"), Some("application/wasm"));
    for bad in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/.hidden",
        "/nothing.js",
    ] {
        let ans = get(&a, &format!("{}{bad}", reg.base));
        assert_eq!(ans.status, 404, "{bad}");
        assert!(!ans.body.contains("not served"));
    }

    // A page on this machine may call the API; a page elsewhere may read
    // it (a page pointed at this registry with `registry=URL`), not upload.
    let pre = a
        .options(&url)
        .header("Origin", "http://localhost:8080")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "content-type, idempotency-key",
        )
        .call()
        .unwrap();
    assert_eq!(pre.status().as_u16(), 204);
    let h = pre.headers();
    assert_eq!(h["access-control-allow-origin"], "http://localhost:8080");
    assert!(h["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("Idempotency-Key"));
    let listed = a
        .get(&url)
        .header("Origin", "http://127.0.0.1:8080")
        .call()
        .unwrap();
    assert_eq!(
        listed.headers()["access-control-allow-origin"],
        "http://127.0.0.1:8080"
    );
    for path in [url.clone(), format!("{url}/1"), format!("{url}?gpu=h200")] {
        let elsewhere = a
            .get(&path)
            .header("Origin", "https://pages.example")
            .call()
            .unwrap();
        assert_eq!(
            elsewhere.headers()["access-control-allow-origin"],
            "*",
            "{path}"
        );
        assert!(elsewhere
            .headers()
            .get("access-control-allow-credentials")
            .is_none());
    }
    let no_origin = a.get(&url).call().unwrap();
    assert!(no_origin
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let evil = a
        .post(&url)
        .header("Origin", "https://evil.example")
        .header("Content-Type", "application/json")
        .send(serde_json::to_string(&profile("cross-site", 1)).unwrap())
        .unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());
    let evil = a
        .get(&format!("{}/", reg.base))
        .header("Origin", "https://evil.example")
        .call()
        .unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());
    let evil = a
        .options(&url)
        .header("Origin", "http://localhost.evil.example")
        .header("Access-Control-Request-Method", "POST")
        .call()
        .unwrap();
    assert!(evil.headers().get("access-control-allow-origin").is_none());

    // Methods the API does not take.
    let ans = a.delete(&format!("{url}/1")).call().unwrap();
    assert_eq!(ans.status().as_u16(), 405);
    let ans = a.put(&url).send(&b"{}"[..]).unwrap();
    assert_eq!(ans.status().as_u16(), 405);
}

#[test]
fn a_database_that_is_not_a_registry_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom-registry"))
        .arg("--db")
        .arg(&junk)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("junk.sqlite") && err.contains("not a database"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&junk).unwrap(),
        vec![b'x'; 8192],
        "left as it was"
    );

    let other = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom-registry"))
        .arg("--db")
        .arg(&other)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("something else"));
    // Left as it was: still in its rollback journal, no WAL file beside it.
    let mode: String = rusqlite::Connection::open(&other)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "another program's file was switched to WAL");
    assert!(!dir.path().join("other.sqlite-wal").exists());

    let usage = std::process::Command::new(env!("CARGO_BIN_EXE_headroom-registry"))
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(64));
}
