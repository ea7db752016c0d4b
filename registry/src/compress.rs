//! The page's files compressed once, beside themselves (`NAME.br`,
//! `NAME.gz`), and which of them a request takes.
//!
//! The page is about 1.1 MB of wasm and JavaScript, 0.43 MB gzipped and
//! less with brotli: on a slow link the compressed files are the difference
//! between seconds and tens of seconds of a blank page. The registry writes
//! them when it starts (only where missing or older than the file), so
//! `scripts/serve.sh` and `scripts/test.sh` serve them with no other step,
//! and `page::serve` sends the smallest the client accepts.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Files smaller than this are sent as they are.
pub const MIN_BYTES: u64 = 1024;

/// The encodings, most preferred first: (`Content-Encoding`, file suffix).
pub const ENCODINGS: [(&str, &str); 2] = [("br", "br"), ("gzip", "gz")];

/// Whether a file of the page is worth compressing (text and wasm).
pub fn compressible(name: &str) -> bool {
    matches!(
        name.rsplit_once('.').map(|(_, ext)| ext),
        Some("wasm" | "js" | "mjs" | "css" | "html" | "svg" | "json" | "txt" | "map")
    )
}

/// Writes `NAME.br` and `NAME.gz` beside every compressible file of `dir`
/// (and its folders) that lacks them or whose copies are older than it.
/// How many files were (re)compressed.
pub fn precompress(dir: &Path) -> std::io::Result<usize> {
    let mut done = 0;
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') {
                continue;
            }
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let meta = std::fs::metadata(&path)?;
            if !compressible(&name) || meta.len() < MIN_BYTES {
                continue;
            }
            let modified = meta.modified()?;
            let stale = |copy: &Path| {
                std::fs::metadata(copy)
                    .and_then(|m| m.modified())
                    .map_or(true, |t| t < modified)
            };
            let br = sibling(&path, "br");
            let gz = sibling(&path, "gz");
            if !stale(&br) && !stale(&gz) {
                continue;
            }
            let bytes = std::fs::read(&path)?;
            write_atomically(&gz, &gzip(&bytes)?)?;
            write_atomically(&br, &brotli(&bytes)?)?;
            done += 1;
        }
    }
    Ok(done)
}

/// `path` with `.suffix` added (`a.wasm` -> `a.wasm.br`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".");
    name.push(suffix);
    PathBuf::from(name)
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes)?;
    encoder.finish()
}

fn brotli(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 22,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params)?;
    Ok(out)
}

/// Writes through a temporary file and a rename, so a reader never sees
/// half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = sibling(path, "tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The encodings an `Accept-Encoding` header accepts, by token (`br`,
/// `gzip`; `q=0` refuses one; `*` accepts any not named).
pub fn accepted(header: &str, encoding: &str) -> bool {
    let mut star = false;
    for part in header.split(',') {
        let mut fields = part.split(';');
        let token = fields.next().unwrap_or("").trim();
        let refused = fields.any(|f| {
            let f = f.trim();
            f.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if token.eq_ignore_ascii_case(encoding) {
            return !refused;
        }
        if token == "*" && !refused {
            star = true;
        }
    }
    star
}

/// Whether a file name carries Trunk's content hash
/// (`headroom-web-376614b465838a92_bg.wasm`, `style-eecb42af9d13e9a3.css`):
/// such a file never changes under its name and can be cached for good.
pub fn content_hashed(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name);
    let stem = stem.strip_suffix("_bg").unwrap_or(stem);
    stem.rsplit_once('-')
        .is_some_and(|(_, hash)| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_encoding_is_read_as_http_says() {
        assert!(accepted("gzip, deflate, br", "br"));
        assert!(accepted("gzip, deflate, br", "gzip"));
        assert!(!accepted("gzip", "br"));
        assert!(!accepted("br;q=0, gzip", "br"));
        assert!(accepted("br;q=0.5", "br"));
        assert!(accepted("*", "gzip"));
        assert!(!accepted("*, gzip;q=0", "gzip"));
        assert!(!accepted("", "gzip"));
        assert!(accepted("GZIP", "gzip"));
    }

    #[test]
    fn trunk_s_hashed_names_are_told_apart() {
        assert!(content_hashed("headroom-web-376614b465838a92_bg.wasm"));
        assert!(content_hashed("headroom-web-376614b465838a92.js"));
        assert!(content_hashed("style-eecb42af9d13e9a3.css"));
        assert!(!content_hashed("index.html"));
        assert!(!content_hashed("headroom-panels_bg.wasm"));
        assert!(!content_hashed("headroom-panels.js"));
        assert!(!content_hashed("style-nothex0000000000.css"));
    }
}
