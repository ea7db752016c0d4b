//! The store under load and under a crash, on a real SQLite file: 200
//! concurrent uploads from 20 clients, one key raced by 20 clients, and the
//! service killed with SIGKILL in the middle of a stream of uploads.

use crate::common;

use common::{agent, check_row, get, integrity, post, profile, rows, try_post, Registry};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const CLIENTS: usize = 20;
const PER_CLIENT: usize = 10;

#[test]
fn concurrent_uploads_are_each_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let url = reg.url();
    let start = Instant::now();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let url = url.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let a = agent();
                let bodies: Vec<(String, Vec<u8>)> = (0..PER_CLIENT)
                    .map(|i| {
                        let name = format!("client {c} upload {i}");
                        let body = serde_json::to_vec(&profile(&name, (c * PER_CLIENT + i) as u32))
                            .unwrap();
                        (name, body)
                    })
                    .collect();
                barrier.wait();
                let mut got = Vec::new();
                for (i, (name, body)) in bodies.iter().enumerate() {
                    let ans = post(&a, &url, body, Some(&format!("c{c}-u{i}")));
                    assert_eq!(ans.status, 201, "{name}: {}", ans.body);
                    got.push((name.clone(), ans.json()["id"].as_i64().unwrap()));
                }
                // Each client's first upload retried: the same row.
                let ans = post(&a, &url, &bodies[0].1, Some(&format!("c{c}-u0")));
                assert_eq!(ans.status, 200, "{}", ans.body);
                assert_eq!(ans.json()["id"].as_i64().unwrap(), got[0].1);
                got
            })
        })
        .collect();
    let accepted: Vec<(String, i64)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let elapsed = start.elapsed();
    assert_eq!(accepted.len(), CLIENTS * PER_CLIENT);
    let ids: BTreeSet<i64> = accepted.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), accepted.len(), "every upload its own id");

    let stored = rows(&reg.db);
    assert_eq!(stored.len(), CLIENTS * PER_CLIENT, "none lost, none twice");
    let by_id: BTreeMap<i64, String> = stored.iter().map(|r| (r.0, r.1.clone())).collect();
    for (name, id) in &accepted {
        assert_eq!(by_id.get(id), Some(name), "row {id}");
    }
    for (id, name, gpu, points, body) in &stored {
        check_row(*id, name, gpu, *points, body);
    }
    assert_eq!(integrity(&reg.db), "ok");
    let a = agent();
    assert_eq!(get(&a, &url).json()["total"], 200);
    println!(
        "{} uploads from {CLIENTS} clients stored once each in {:.2} s",
        CLIENTS * PER_CLIENT,
        elapsed.as_secs_f64()
    );
}

#[test]
fn one_key_raced_by_many_clients_is_one_row() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("r.sqlite"), &[]);
    let url = reg.url();
    let body = serde_json::to_vec(&profile("raced", 1)).unwrap();
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let handles: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, body, barrier) = (url.clone(), body.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let a = agent();
                barrier.wait();
                let ans = post(&a, &url, &body, Some("fedcba9876543210"));
                (ans.status, ans.json()["id"].as_i64().unwrap())
            })
        })
        .collect();
    let answers: Vec<(u16, i64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        answers.iter().filter(|a| a.0 == 201).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        answers.iter().filter(|a| a.0 == 200).count(),
        CLIENTS - 1,
        "{answers:?}"
    );
    assert!(answers.iter().all(|a| a.1 == answers[0].1));
    assert_eq!(rows(&reg.db).len(), 1);
}

#[test]
fn sigkill_mid_stream_loses_no_accepted_upload() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.sqlite");
    let mut reg = Registry::start(&db, &[]);
    let url = reg.url();
    let accepted = Arc::new(Mutex::new(Vec::<(String, i64)>::new()));
    let unanswered = Arc::new(Mutex::new(Vec::<(String, Vec<u8>, String)>::new()));
    let attempted = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    const STREAMS: usize = 4;
    let handles: Vec<_> = (0..STREAMS)
        .map(|s| {
            let (url, accepted, unanswered, attempted, stop) = (
                url.clone(),
                Arc::clone(&accepted),
                Arc::clone(&unanswered),
                Arc::clone(&attempted),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                let a = agent();
                for i in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let name = format!("stream {s} upload {i}");
                    let body = serde_json::to_vec(&profile(&name, i)).unwrap();
                    attempted.fetch_add(1, Ordering::SeqCst);
                    let key = format!("s{s}-{i}");
                    match try_post(&a, &url, &body, Some(&key)) {
                        Ok(ans) => {
                            assert_eq!(ans.status, 201, "{name}: {}", ans.body);
                            let id = ans.json()["id"].as_i64().unwrap();
                            accepted.lock().unwrap().push((name, id));
                        }
                        // The service is gone: this upload's fate is unknown.
                        Err(_) => {
                            unanswered.lock().unwrap().push((name, body, key));
                            break;
                        }
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while accepted.lock().unwrap().len() < 60 {
        assert!(Instant::now() < deadline, "the stream is too slow");
        std::thread::sleep(Duration::from_millis(5));
    }
    reg.kill();
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    let attempted = attempted.load(Ordering::SeqCst);

    // Restarted on the same file: every 201 is there, each row whole.
    let reg = Registry::start(&db, &[]);
    assert_eq!(integrity(&db), "ok");
    let stored = rows(&db);
    let by_id: BTreeMap<i64, String> = stored.iter().map(|r| (r.0, r.1.clone())).collect();
    for (name, id) in &accepted {
        assert_eq!(
            by_id.get(id),
            Some(name),
            "accepted upload {name} (id {id}) after the crash"
        );
    }
    for (id, name, gpu, points, body) in &stored {
        check_row(*id, name, gpu, *points, body);
    }
    let names: BTreeSet<&String> = stored.iter().map(|r| &r.1).collect();
    assert_eq!(names.len(), stored.len(), "no upload twice");
    // At most the uploads in flight at the kill were stored unanswered.
    assert!(stored.len() >= accepted.len() && stored.len() <= accepted.len() + STREAMS);
    assert!(stored.len() <= attempted);

    // The restarted service takes uploads, and the retry of an upload in
    // flight at the kill (the same key, as the collector retries) lands
    // once, whether or not it was stored before the kill.
    let a = agent();
    let unanswered = unanswered.lock().unwrap().clone();
    for (name, body, key) in &unanswered {
        let ans = post(&a, &reg.url(), body, Some(key));
        assert!(
            ans.status == 201 || ans.status == 200,
            "{name}: {}",
            ans.body
        );
        let was_stored = stored.iter().any(|r| &r.1 == name);
        assert_eq!(ans.status == 200, was_stored, "{name}");
    }
    assert_eq!(rows(&db).len(), accepted.len() + unanswered.len());
    let ans = post(
        &a,
        &reg.url(),
        &serde_json::to_vec(&profile("after the crash", 1)).unwrap(),
        None,
    );
    assert_eq!(ans.status, 201, "{}", ans.body);
    assert!(ans.json()["id"].as_i64().unwrap() > stored.iter().map(|r| r.0).max().unwrap());
    println!(
        "killed after {} accepted uploads ({} attempted, {} stored)",
        accepted.len(),
        attempted,
        stored.len()
    );
}

/// A new registry started with `--seed calibration/profiles` holds the
/// committed profiles (the H200's and the H100's), each listed under its
/// card; a restart on the same file does not store them twice.
#[test]
fn a_new_registry_is_seeded_with_the_committed_profiles_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("seeded.sqlite");
    let seed = concat!(env!("CARGO_MANIFEST_DIR"), "/../calibration/profiles");
    let committed = std::fs::read_dir(seed)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "json")
        })
        .count() as u64;
    assert!(committed >= 2);
    for _ in 0..2 {
        let mut reg = Registry::start(&db, &["--seed", seed]);
        let a = agent();
        let all = get(&a, &reg.url()).json();
        assert_eq!(all["total"].as_u64(), Some(committed), "{all}");
        for gpu in ["H200", "H100"] {
            let listed = get(&a, &format!("{}?gpu={gpu}", reg.url())).json();
            assert_eq!(listed["total"].as_u64(), Some(1), "{gpu}: {listed}");
        }
        reg.kill();
    }
}
