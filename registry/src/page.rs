//! The built page (`trunk build`'s `dist/`), served from the same process
//! as the API, so the page can call `/api/v1/...` on its own origin.

use crate::App;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
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

/// Everything that is not an API route: a file of the page.
pub async fn serve(State(app): State<Arc<App>>, method: Method, uri: Uri) -> Response {
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
    match tokio::fs::read(&file).await {
        Ok(bytes) => {
            let name = rel.to_string_lossy();
            let mut resp = (StatusCode::OK, bytes).into_response();
            let h = resp.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(content_type(&name)),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            resp
        }
        Err(_) if uri.path() == "/" => plain(
            StatusCode::NOT_FOUND,
            "The page is not built here (no index.html in the page folder; build it with `trunk build --release`, or pass --dist). The API answers under /api/v1/profiles.\n",
        ),
        Err(_) => plain(StatusCode::NOT_FOUND, "not found\n"),
    }
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
