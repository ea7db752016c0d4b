//! The page's files as the registry serves them: brotli or gzip when the
//! client accepts it (written beside each file when the registry starts),
//! the same bytes once decoded, and Trunk's content-hashed files cached for
//! good. Raw HTTP, so that no client decodes for the test.

use crate::common::Registry;
use std::io::{Read, Write};
use std::net::TcpStream;

/// `GET path` with `accept` as Accept-Encoding: (headers in lower case,
/// body).
fn fetch(base: &str, path: &str, accept: Option<&str>) -> (String, Vec<u8>) {
    let addr = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept-Encoding: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = raw[split + 4..].to_vec();
    assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
    assert!(!head.contains("transfer-encoding: chunked"), "{head}");
    (head, body)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim)
}

#[test]
fn the_page_is_sent_compressed_and_its_hashed_files_cached_for_good() {
    let dir = tempfile::tempdir().unwrap();
    let dist = dir.path().join("dist");
    std::fs::create_dir(&dist).unwrap();
    let wasm: Vec<u8> = (0..200_000u32)
        .map(|i| (i % 251) as u8 ^ (i / 1000) as u8)
        .collect();
    let wasm_name = "headroom-web-0123456789abcdef_bg.wasm";
    std::fs::write(dist.join(wasm_name), &wasm).unwrap();
    let index = "<!DOCTYPE html><title>headroom</title>".repeat(100);
    std::fs::write(dist.join("index.html"), &index).unwrap();
    std::fs::write(dist.join("tiny.js"), "x").unwrap();
    let reg = Registry::start(
        &dir.path().join("r.sqlite"),
        &["--dist", dist.to_str().unwrap()],
    );
    let base = &reg.base;
    // The copies are written while the registry serves.
    let copies = [
        dist.join(format!("{wasm_name}.br")),
        dist.join(format!("{wasm_name}.gz")),
        dist.join("index.html.br"),
        dist.join("index.html.gz"),
    ];
    let start = std::time::Instant::now();
    while !copies.iter().all(|c| c.is_file()) {
        assert!(
            start.elapsed().as_secs() < 60,
            "no compressed copies after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    let path = format!("/{wasm_name}");
    let (head, body) = fetch(base, &path, Some("gzip, deflate, br"));
    assert_eq!(header(&head, "content-encoding"), Some("br"), "{head}");
    assert_eq!(header(&head, "content-type"), Some("application/wasm"));
    assert_eq!(header(&head, "vary"), Some("accept-encoding"));
    assert_eq!(
        header(&head, "cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let mut decoded = Vec::new();
    brotli::BrotliDecompress(&mut &body[..], &mut decoded).unwrap();
    assert_eq!(decoded, wasm);
    assert!(
        body.len() < wasm.len() / 2,
        "{} of {}",
        body.len(),
        wasm.len()
    );

    let (head, body) = fetch(base, &path, Some("gzip"));
    assert_eq!(header(&head, "content-encoding"), Some("gzip"), "{head}");
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut decoded)
        .unwrap();
    assert_eq!(decoded, wasm);

    let (head, body) = fetch(base, &path, None);
    assert_eq!(header(&head, "content-encoding"), None, "{head}");
    assert_eq!(body, wasm);
    let (head, _) = fetch(base, &path, Some("br;q=0, gzip;q=0"));
    assert_eq!(header(&head, "content-encoding"), None, "{head}");

    // The page itself is revalidated; a file too small to gain is sent as is.
    let (head, body) = fetch(base, "/", Some("br"));
    assert_eq!(header(&head, "cache-control"), Some("no-cache"));
    assert_eq!(header(&head, "content-encoding"), Some("br"));
    let mut decoded = Vec::new();
    brotli::BrotliDecompress(&mut &body[..], &mut decoded).unwrap();
    assert_eq!(decoded, index.as_bytes());
    let (head, body) = fetch(base, "/tiny.js", Some("br"));
    assert_eq!(header(&head, "content-encoding"), None);
    assert_eq!(body, b"x");
}

#[test]
fn a_copy_older_than_its_file_is_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let dist = dir.path().join("dist");
    std::fs::create_dir(&dist).unwrap();
    std::fs::write(dist.join("index.html"), "<p>old</p>".repeat(200)).unwrap();
    let reg = Registry::start(
        &dir.path().join("r.sqlite"),
        &["--dist", dist.to_str().unwrap()],
    );
    let start = std::time::Instant::now();
    while !(dist.join("index.html.gz").is_file() && dist.join("index.html.br").is_file()) {
        assert!(
            start.elapsed().as_secs() < 60,
            "no compressed copy after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The page rebuilt while the registry runs: its copies are stale.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new = "<p>new</p>".repeat(200);
    std::fs::write(dist.join("index.html"), &new).unwrap();
    let (head, body) = fetch(&reg.base, "/", Some("br, gzip"));
    assert_eq!(header(&head, "content-encoding"), None, "{head}");
    assert_eq!(body, new.as_bytes());
}
