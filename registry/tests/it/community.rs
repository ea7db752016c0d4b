//! A registry opened to a community: uploads with a token the operator
//! issued, each pending until approved, its accuracy claims recomputed,
//! quotas per token; writes from other sites' pages refused; idle and
//! trickling clients that cannot hold it up; a backup while it serves.

use crate::common;

use common::{add_token, agent, get, operator, post, post_with, profile, rows, Registry};
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn body(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn uploads_need_a_token_and_wait_for_review() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("fresh.sqlite");
    let reg = Registry::start_reviewed(&db, &[]);
    assert!(
        reg.first_line.contains("token") && !reg.first_line.contains("OPEN"),
        "{}",
        reg.first_line
    );
    let a = agent();
    let url = reg.url();
    let p = body(&profile("community H200", 1));

    // No token, a malformed one, one the registry never issued: 401.
    for headers in [
        vec![],
        vec![("Authorization", "Basic dXNlcjpwYXNz".to_string())],
        vec![("Authorization", bearer("hr_0123"))],
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let refused = post_with(&a, &url, &p, &headers);
        assert_eq!(refused.status, 401, "{headers:?}: {}", refused.body);
        assert_eq!(refused.json()["field"], "Authorization");
        assert!(refused
            .header("www-authenticate")
            .unwrap()
            .starts_with("Bearer"));
    }
    assert!(rows(&db).is_empty());

    // A token issued while the registry serves; kept hashed only.
    let token = add_token(&db, "alice");
    let raw = std::fs::read(&db).unwrap();
    let wal = std::fs::read(db.with_extension("sqlite-wal")).unwrap_or_default();
    for bytes in [&raw, &wal] {
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the token is stored in clear"
        );
    }
    let auth = bearer(&token);
    let stored = post_with(&a, &url, &p, &[("Authorization", &auth)]);
    assert_eq!(stored.status, 201, "{}", stored.body);
    assert_eq!(stored.json()["status"], "pending");
    let id = stored.json()["id"].as_i64().unwrap();

    // Nothing is listed until an operator approves it.
    let listed = get(&a, &url).json();
    assert_eq!(listed["total"], 0, "{listed}");
    let health = get(&a, &format!("{}/api/v1/health", reg.base)).json();
    assert_eq!(health, json!({"status": "ok", "profiles": 0, "pending": 1}));
    let waiting = get(&a, &format!("{url}?status=pending")).json();
    assert_eq!(waiting["total"], 1);
    assert_eq!(waiting["profiles"][0]["status"], "pending");
    let fetched = get(&a, &format!("{url}/{id}"));
    assert_eq!(fetched.header("x-profile-status"), Some("pending"));
    let (code, pending, _) = operator(&["pending".as_ref(), "--db".as_ref(), db.as_os_str()]);
    assert_eq!(code, Some(0));
    assert!(pending.starts_with(&format!("{id}\t")), "{pending}");

    let db_arg = db.as_os_str();
    let (code, _, err) = operator(&[
        "approve".as_ref(),
        id.to_string().as_ref(),
        "--db".as_ref(),
        db_arg,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let listed = get(&a, &url).json();
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["profiles"][0]["id"], id);
    assert_eq!(listed["profiles"][0]["status"], "approved");

    // A rejected profile is neither listed nor served, and stays rejected.
    let other = body(&profile("to be rejected", 2));
    let second = post_with(&a, &url, &other, &[("Authorization", &auth)]);
    let second_id = second.json()["id"].as_i64().unwrap();
    let (code, _, _) = operator(&[
        "reject".as_ref(),
        second_id.to_string().as_ref(),
        "--db".as_ref(),
        db_arg,
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(get(&a, &format!("{url}/{second_id}")).status, 404);
    let again = post_with(&a, &url, &other, &[("Authorization", &auth)]);
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["status"], "rejected");
    assert_eq!(get(&a, &format!("{url}?status=all")).json()["total"], 1);

    // Operator mistakes are named.
    let (code, _, err) = operator(&["approve".as_ref(), "999".as_ref(), "--db".as_ref(), db_arg]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no profile 999"), "{err}");
    let missing = dir.path().join("typo.sqlite");
    let (code, _, err) = operator(&["pending".as_ref(), "--db".as_ref(), missing.as_os_str()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no such database"), "{err}");
    assert!(!missing.exists());
    let (code, _, err) = operator(&[
        "token".as_ref(),
        "add".as_ref(),
        "bad name".as_ref(),
        "--db".as_ref(),
        db_arg,
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not a token name"), "{err}");

    // A revoked token uploads no more.
    let (code, _, _) = operator(&[
        "token".as_ref(),
        "revoke".as_ref(),
        "alice".as_ref(),
        "--db".as_ref(),
        db_arg,
    ]);
    assert_eq!(code, Some(0));
    let late = post_with(
        &a,
        &url,
        &body(&profile("late", 3)),
        &[("Authorization", &auth)],
    );
    assert_eq!(late.status, 401);
}

#[test]
fn claims_are_recomputed_from_the_points() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.sqlite");
    let reg = Registry::start_reviewed(&db, &[]);
    let token = add_token(&db, "lab");
    let auth = bearer(&token);
    let a = agent();
    let url = reg.url();

    let honest = profile("doctored", 1);
    let mut doctored = honest.clone();
    doctored["summary"]["after"]["median_abs_err"] = json!(0.0001);
    doctored["summary"]["after"]["max_abs_err"] = json!(0.0002);
    doctored["fit"]["residual_std_bytes"] = json!(1);
    doctored["points"][0]["prediction"]["error_after"] = json!(0.0);
    let stored = post_with(&a, &url, &body(&doctored), &[("Authorization", &auth)]);
    assert_eq!(stored.status, 201, "{}", stored.body);
    let recomputed: Vec<String> =
        serde_json::from_value(stored.json()["recomputed"].clone()).unwrap();
    for field in [
        "summary.after.median_abs_err",
        "summary.after.max_abs_err",
        "fit.residual_std_bytes",
        "points[0].prediction",
    ] {
        assert!(
            recomputed.iter().any(|f| f == field),
            "{field} not in {recomputed:?}"
        );
    }
    let id = stored.json()["id"].as_i64().unwrap();
    let fetched = get(&a, &format!("{url}/{id}"));
    let kept = headroom_core::calibration::parse(&fetched.body, &Default::default()).unwrap();
    let expected = common::recomputed(
        headroom_core::calibration::from_value(&honest, &Default::default()).unwrap(),
    );
    assert_eq!(kept, expected, "only the recomputed figures are stored");
    assert_ne!(kept.summary.after.median_abs_err, 0.0001);
    // The honest profile is the same content: the same row.
    let same = post_with(&a, &url, &body(&honest), &[("Authorization", &auth)]);
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(same.json()["id"], id);

    // Names that hide or reorder text.
    for (field, pointer, text) in [
        ("name", "/name", "H200 \u{202e}lanif"),
        ("gpu.name", "/gpu/name", "NVIDIA\u{200b}H200"),
        ("points[0].case", "/points/0/case", "case\u{2066}x"),
    ] {
        let mut hidden = profile("hidden", 3);
        *hidden.pointer_mut(pointer).unwrap() = json!(text);
        let refused = post_with(&a, &url, &body(&hidden), &[("Authorization", &auth)]);
        assert_eq!(refused.status, 422, "{field}: {}", refused.body);
        assert_eq!(refused.json()["field"], field);
        assert!(refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("invisible"));
    }

    // Claims with no points to support them.
    let mut empty = profile("no points", 2);
    empty["points"] = json!([]);
    let refused = post_with(&a, &url, &body(&empty), &[("Authorization", &auth)]);
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(refused.json()["field"], "points");
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("summary.after.cases"));
    assert_eq!(rows(&db).len(), 1);
}

#[test]
fn each_token_has_a_daily_quota() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.sqlite");
    let reg = Registry::start_reviewed(&db, &["--uploads-per-day", "2"]);
    let auth = bearer(&add_token(&db, "busy"));
    let other = bearer(&add_token(&db, "quiet"));
    let a = agent();
    let url = reg.url();
    for n in 1..=2 {
        let ok = post_with(
            &a,
            &url,
            &body(&profile("quota", n)),
            &[("Authorization", &auth)],
        );
        assert_eq!(ok.status, 201, "{}", ok.body);
    }
    let over = post_with(
        &a,
        &url,
        &body(&profile("quota", 3)),
        &[("Authorization", &auth)],
    );
    assert_eq!(over.status, 429, "{}", over.body);
    assert_eq!(over.json()["field"], "Authorization");
    assert!(over.header("retry-after").is_some());
    // Another token has its own allowance; a byte quota counts bytes.
    let theirs = post_with(
        &a,
        &url,
        &body(&profile("quota", 4)),
        &[("Authorization", &other)],
    );
    assert_eq!(theirs.status, 201);
    drop(reg);
    let reg = Registry::start_reviewed(&db, &["--bytes-per-day", "1000"]);
    let small = bearer(&add_token(&db, "small"));
    let over = post_with(
        &a,
        &reg.url(),
        &body(&profile("quota", 5)),
        &[("Authorization", &small)],
    );
    assert_eq!(over.status, 429, "{}", over.body);
    assert!(over.json()["error"].as_str().unwrap().contains("bytes"));
    assert_eq!(rows(&db).len(), 3);
}

#[test]
fn a_post_from_another_sites_page_is_forbidden() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let a = agent();
    let url = reg.url();
    for origin in [
        "https://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
    ] {
        let refused = post_with(
            &a,
            &url,
            &body(&profile("cross-site", 1)),
            &[("Origin", origin)],
        );
        assert_eq!(refused.status, 403, "{origin}: {}", refused.body);
        assert_eq!(refused.json()["field"], "Origin");
    }
    assert!(rows(&reg.db).is_empty());
    // The registry's own page, and a client that sends no Origin, may.
    let own = reg.base.clone();
    let ok = post_with(
        &a,
        &url,
        &body(&profile("own page", 2)),
        &[("Origin", &own)],
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
    assert_eq!(
        post(&a, &url, &body(&profile("no origin", 3)), None).status,
        201
    );
    drop(reg);

    // Behind a proxy: the public URL is the origin.
    let reg = Registry::start(
        &dir.path().join("p.sqlite"),
        &["--public-url", "https://profiles.example"],
    );
    let url = reg.url();
    let ok = post_with(
        &a,
        &url,
        &body(&profile("proxied", 4)),
        &[("Origin", "https://profiles.example")],
    );
    assert_eq!(ok.status, 201, "{}", ok.body);
    let refused = post_with(
        &a,
        &url,
        &body(&profile("proxied", 5)),
        &[("Origin", "https://other.example")],
    );
    assert_eq!(refused.status, 403);
}

/// Raises this process's open-file limit to at least `want` (as far as the
/// hard limit allows): the test holds thousands of sockets.
fn raise_fd_limit(want: libc::rlim_t) {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = lim.rlim_max.min(want);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Whether the server closed `s` (EOF or reset) within `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut byte = [0u8; 1];
    !matches!(s.read(&mut byte), Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

#[test]
fn idle_connections_from_one_address_do_not_hold_it_up() {
    const IDLE: usize = 2000;
    raise_fd_limit(IDLE as libc::rlim_t + 200);
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &["--header-timeout-s", "30"]);
    let port: u16 = reg.base.rsplit(':').next().unwrap().parse().unwrap();
    // The idle clients come from 127.0.0.2, the health checks from
    // 127.0.0.1: one address's connections are capped, not everyone's.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let idle: Vec<TcpStream> = rt.block_on(async {
        let mut out = Vec::new();
        for _ in 0..IDLE {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            match socket
                .connect(format!("127.0.0.1:{port}").parse().unwrap())
                .await
            {
                Ok(s) => out.push(s.into_std().unwrap()),
                Err(e) => panic!("connection {} failed: {e}", out.len()),
            }
        }
        out
    });
    assert_eq!(idle.len(), IDLE);
    let a = agent();
    let started = Instant::now();
    let health = get(&a, &format!("{}/api/v1/health", reg.base));
    assert_eq!(health.status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "health took {:?}",
        started.elapsed()
    );
    // All but the address's cap (64) were closed at once: checked, within
    // a few seconds, with a short read on each.
    let mut open: Vec<TcpStream> = idle;
    let mut closed = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while closed < IDLE - 64 && Instant::now() < deadline {
        let mut still = Vec::new();
        for mut s in open {
            s.set_nonblocking(false).unwrap();
            if closed_within(&mut s, Duration::from_millis(5)) {
                closed += 1;
            } else {
                still.push(s);
            }
        }
        open = still;
    }
    assert!(
        closed >= IDLE - 64,
        "only {closed} of {IDLE} idle connections were closed"
    );
}

#[test]
fn a_silent_connection_is_closed_after_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &["--header-timeout-s", "1"]);
    let mut silent = TcpStream::connect(reg.base.trim_start_matches("http://")).unwrap();
    let started = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn sigterm_stops_it_within_5_s_while_a_client_trickles_headers() {
    let dir = tempfile::tempdir().unwrap();
    let mut reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let address = reg.base.trim_start_matches("http://").to_string();
    let trickler = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&address).unwrap();
        for b in b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: "
            .iter()
            .cycle()
            .take(200)
        {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    std::thread::sleep(Duration::from_millis(800));
    // SAFETY: kill(2) on the child's pid with SIGTERM.
    let sent = unsafe { libc::kill(reg.pid() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let started = Instant::now();
    let status = reg.wait_for_exit(Duration::from_secs(5));
    assert!(status.is_some(), "still running 5 s after SIGTERM");
    assert!(status.unwrap().success(), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(trickler);
}

#[test]
fn a_backup_taken_while_it_serves_restores_to_the_same_listing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.sqlite");
    let reg = Registry::start(&db, &[]);
    let a = agent();
    let url = reg.url();
    for n in 0..5 {
        assert_eq!(
            post(&a, &url, &body(&profile("before the backup", n)), None).status,
            201
        );
    }
    // Uploads keep arriving while the backup runs.
    let writer_url = url.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = std::sync::Arc::clone(&stop);
    let writer = std::thread::spawn(move || {
        let a = agent();
        let mut n = 100;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = post(
                &a,
                &writer_url,
                &body(&profile("during the backup", n)),
                None,
            );
            n += 1;
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    let backup = dir.path().join("backup.sqlite");
    let (code, _, err) = operator(&[
        "backup".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--to".as_ref(),
        backup.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    // A backup never overwrites.
    let (code, _, err) = operator(&[
        "backup".as_ref(),
        "--db".as_ref(),
        db.as_os_str(),
        "--to".as_ref(),
        backup.as_os_str(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("exists"), "{err}");
    let live: Value = get(&a, &format!("{url}?limit=1000")).json();

    let restored = dir.path().join("restored").join("r.sqlite");
    let (code, _, err) = operator(&[
        "restore".as_ref(),
        "--from".as_ref(),
        backup.as_os_str(),
        "--db".as_ref(),
        restored.as_os_str(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(common::integrity(&restored), "ok");
    let again = Registry::start(&restored, &[]);
    let back: Value = get(&a, &format!("{}?limit=1000", again.url())).json();
    // The restored listing is the live one as it was at the backup: every
    // row it has is the live row, and it has every row stored before.
    let by_id = |v: &Value| -> std::collections::BTreeMap<i64, Value> {
        v["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["id"].as_i64().unwrap(), e.clone()))
            .collect()
    };
    let (live, back) = (by_id(&live), by_id(&back));
    assert!(back.len() >= 5, "{}", back.len());
    let newest = *back.keys().max().unwrap();
    let live_then: std::collections::BTreeMap<i64, Value> =
        live.into_iter().filter(|(id, _)| *id <= newest).collect();
    assert_eq!(back, live_then);

    // Restore refuses to overwrite, and refuses what is not a registry's.
    let (code, _, err) = operator(&[
        "restore".as_ref(),
        "--from".as_ref(),
        backup.as_os_str(),
        "--db".as_ref(),
        restored.as_os_str(),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("exists"), "{err}");
    let foreign = dir.path().join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
    let (code, _, err) = operator(&[
        "restore".as_ref(),
        "--from".as_ref(),
        foreign.as_os_str(),
        "--db".as_ref(),
        OsStr::new(dir.path().join("x.sqlite").as_os_str()),
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("something else"), "{err}");
}

#[test]
fn another_programs_file_with_its_own_application_id_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("app.sqlite");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch(
        "PRAGMA application_id = 12345; PRAGMA user_version = 2; CREATE TABLE profiles (x);",
    )
    .unwrap();
    drop(conn);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headroom-registry"))
        .arg("--db")
        .arg(&other)
        .args(["--listen", "127.0.0.1:0", "--open"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another program"));
    let mode: String = rusqlite::Connection::open(&other)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
}

#[test]
fn a_database_of_the_first_schema_is_migrated_with_its_rows_listed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v1.sqlite");
    let stored = serde_json::to_string(&profile("stored before tokens", 1)).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE profiles (
            id INTEGER PRIMARY KEY AUTOINCREMENT, idempotency_key TEXT UNIQUE,
            name TEXT NOT NULL, gpu TEXT NOT NULL, gpu_total_bytes INTEGER NOT NULL,
            compute_capability TEXT, driver TEXT, cuda TEXT, torch TEXT, transformers TEXT,
            collector_version TEXT NOT NULL, points INTEGER NOT NULL, fit TEXT NOT NULL,
            summary TEXT NOT NULL, created TEXT NOT NULL, body TEXT NOT NULL);
         CREATE INDEX profiles_gpu ON profiles (gpu);
         PRAGMA user_version = 1;",
    )
    .unwrap();
    for key in ["a", "b"] {
        conn.execute(
            "INSERT INTO profiles (idempotency_key, name, gpu, gpu_total_bytes, collector_version,
                 points, fit, summary, created, body)
             VALUES (?1, 'stored before tokens', 'NVIDIA H200', 150109880320, '0.1.0', 5, '{}', '{}',
                 '2026-11-30T06:00:01Z', ?2)",
            rusqlite::params![key, stored],
        )
        .unwrap();
    }
    drop(conn);
    let reg = Registry::start_reviewed(&db, &[]);
    let listed = get(&agent(), &reg.url()).json();
    assert_eq!(listed["total"], 2, "{listed}");
    assert_eq!(listed["profiles"][0]["status"], "approved");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2);
    let hashed: i64 = conn
        .query_row("SELECT count(content_hash) FROM profiles", [], |r| r.get(0))
        .unwrap();
    assert_eq!(hashed, 1, "the same body twice keeps one hash");
}
