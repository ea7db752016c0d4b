//! The built page (`trunk build`'s `dist/`), served from the same process
//! as the API, so the page can call `/api/v1/...` on its own origin.

use crate::compress;
use crate::App;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::path::PathBuf;
use std::sync::Arc;

/// The content type of a file of the page, by its extension.
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("txt") => "text/plain; charset=utf-8",
        Some("woff2") => "font/woff2",
        _ => "application/octet-stream",
    }
}

/// The file under the page's folder that `path` names: `/` is
/// `index.html`; segments of letters, digits, `-`, `_` and `.` only, none
/// starting with a dot (so nothing outside the folder, and no hidden file).
pub fn file_for(path: &str) -> Option<PathBuf> {
    let rel = path.strip_prefix('/').unwrap_or(path);
    let rel = if rel.is_empty() { "index.html" } else { rel };
    let mut out = PathBuf::new();
    for seg in rel.split('/') {
        let ok = !seg.is_empty()
            && !seg.starts_with('.')
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return None;
        }
        out.push(seg);
    }
    Some(out)
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// Everything that is not an API route: a file of the page, compressed
/// when the client accepts brotli or gzip and the registry wrote the copy
/// ([`crate::compress`]); a file with Trunk's content hash in its name is
/// cached for good, any other revalidated each time.
pub async fn serve(
    State(app): State<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    if uri.path().starts_with("/api/") || uri.path() == "/api" {
        return crate::api::not_an_endpoint();
    }
    if method != Method::GET && method != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    let Some(rel) = file_for(uri.path()) else {
        return plain(StatusCode::NOT_FOUND, "not found\n");
    };
    let file = app.dist.join(&rel);
    let name = rel.to_string_lossy().into_owned();
    let accept = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut encoding = None;
    let mut body = None;
    if compress::compressible(&name) {
        for (token, suffix) in compress::ENCODINGS {
            if !compress::accepted(accept, token) {
                continue;
            }
            // A copy older than the file is stale (the page was rebuilt
            // while the registry ran): the file itself is sent.
            if let Ok(bytes) = read_if_fresh(&file, &compress::sibling(&file, suffix)).await {
                encoding = Some(token);
                body = Some(bytes);
                break;
            }
        }
    }
    let read = match body {
        Some(bytes) => Ok(bytes),
        None => tokio::fs::read(&file).await,
    };
    match read {
        Ok(bytes) => {
            let mut resp = (StatusCode::OK, bytes).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(content_type(&name)),
            );
            let cache = if compress::content_hashed(&name) {
                "public, max-age=31536000, immutable"
            } else {
                "no-cache"
            };
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
            if compress::compressible(&name) {
                h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            }
            if let Some(token) = encoding {
                h.insert(header::CONTENT_ENCODING, HeaderValue::from_static(token));
            }
            resp
        }
        Err(_) if uri.path() == "/" => plain(
            StatusCode::NOT_FOUND,
            "The page is not built here (no index.html in the page folder; build it with `trunk build --release`, or pass --dist). The API answers under /api/v1/profiles.\n",
        ),
        Err(_) => plain(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// The compressed copy `copy` of `file`, unless it is missing or older.
async fn read_if_fresh(file: &std::path::Path, copy: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let original = tokio::fs::metadata(file).await?.modified()?;
    let compressed = tokio::fs::metadata(copy).await?.modified()?;
    if compressed < original {
        return Err(std::io::Error::other("stale"));
    }
    tokio::fs::read(copy).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_inside_the_folder() {
        assert_eq!(file_for("/"), Some(PathBuf::from("index.html")));
        assert_eq!(
            file_for("/headroom-web-1a2b_bg.wasm"),
            Some(PathBuf::from("headroom-web-1a2b_bg.wasm"))
        );
        assert_eq!(file_for("/img/a.png"), Some(PathBuf::from("img/a.png")));
        for bad in [
            "/../x",
            "/a/../../x",
            "/.git/config",
            "//etc/passwd",
            "/a%2f..",
            "/a\\b",
            "/a/",
        ] {
            assert_eq!(file_for(bad), None, "{bad}");
        }
        assert_eq!(content_type("x_bg.wasm"), "application/wasm");
        assert_eq!(content_type("noext"), "application/octet-stream");
    }
}
