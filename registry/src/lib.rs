//! # headroom-registry
//!
//! The profile registry: `headroom upload` POSTs calibration
//! profiles here, with a token the operator issued (unless the registry
//! runs `--open`); they are checked with the core's schema code
//! ([`headroom_core::calibration::from_value`]), their accuracy claims
//! recomputed from their points by the core
//! ([`headroom_core::calibration::recompute`]), stored in one SQLite file
//! ([`db`]) as pending until an operator approves them, and listed for the
//! page, which the same process serves from its `dist/` folder ([`page`]).
//! [`server`] is the accept loop with its timeouts and connection caps. The
//! endpoints are described in the crate's README.

pub mod api;
pub mod compress;
pub mod db;
pub mod limiter;
pub mod page;
pub mod server;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::path::PathBuf;
use std::sync::Arc;

/// Largest upload body, bytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// How the service runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The SQLite file (created on first start).
    pub db: PathBuf,
    /// The built page (`trunk build`'s `dist/`).
    pub dist: PathBuf,
    /// Uploads a minute per client address (0: no limit).
    pub uploads_per_minute: u32,
    /// No token and no review: anyone who reaches the port publishes.
    pub open: bool,
    /// The address users reach the registry by (`https://profiles.example`),
    /// when a proxy stands in front: the one browser origin that may POST.
    pub public_url: Option<String>,
    /// Each token's daily allowance.
    pub quota: db::Quota,
}

/// The shared state of every request.
pub struct App {
    /// The store.
    pub db: db::Db,
    /// Uploads per client address.
    pub limiter: limiter::Limiter,
    /// The built page.
    pub dist: PathBuf,
    /// No token and no review.
    pub open: bool,
    /// The browser origin of `--public-url` (`https://host[:port]`).
    pub public_origin: Option<String>,
    /// Each token's daily allowance.
    pub quota: db::Quota,
    /// Recomputations of uploaded profiles running at once: at most one a
    /// core, so that uploads cannot starve the listing and the page.
    pub recompute_slots: tokio::sync::Semaphore,
}

/// The origin (`scheme://host[:port]`, lower case) of a URL.
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty() && !host.contains('@'))
        .then(|| format!("{scheme}://{host}").to_ascii_lowercase())
}

/// The default port of a scheme, which an origin may leave out.
fn default_port(scheme: &str) -> &'static str {
    if scheme == "https" {
        ":443"
    } else {
        ":80"
    }
}

/// Whether a browser `origin` is the registry itself: its `--public-url`,
/// or the `host` the request was sent to (either scheme: a TLS proxy in
/// front), or, for a registry reached as `localhost`, another page on the
/// same machine (Trunk's dev server, `scripts/serve.sh --watch`).
pub fn same_origin(origin: &str, host: Option<&str>, public_origin: Option<&str>) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    let with_port = |o: &str| -> String {
        match o.split_once("://") {
            Some((scheme, h)) if !h.contains(':') || h.ends_with(']') => {
                format!("{o}{}", default_port(scheme))
            }
            _ => o.to_string(),
        }
    };
    if public_origin.is_some_and(|p| with_port(p) == with_port(&origin)) {
        return true;
    }
    let Some(host) = host.map(|h| h.trim().to_ascii_lowercase()) else {
        return false;
    };
    let Some((scheme, origin_host)) = origin.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") {
        return false;
    }
    let host_with_port = if host.contains(':') && !host.ends_with(']') {
        host.clone()
    } else {
        format!("{host}{}", default_port(scheme))
    };
    if with_port(&origin) == format!("{scheme}://{host_with_port}") || origin_host == host {
        return true;
    }
    local_origin(&origin) && local_origin(&format!("http://{host}"))
}

impl App {
    /// Opens the database (creating it) for `config`.
    pub fn open(config: &Config) -> Result<App, db::DbError> {
        Ok(App {
            db: db::Db::open(&config.db)?,
            limiter: limiter::Limiter::new(config.uploads_per_minute),
            dist: config.dist.clone(),
            open: config.open,
            public_origin: config.public_url.as_deref().and_then(origin_of),
            quota: config.quota,
            recompute_slots: tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
        })
    }

    /// On an empty database, stores every profile file (`*.json`, in name
    /// order) of `dir`, each checked as an upload is (its claims recomputed)
    /// and approved; a database that holds profiles is left as it is. How
    /// many were stored.
    pub fn seed(&self, dir: &std::path::Path) -> Result<usize, String> {
        if self.db.count().map_err(|e| e.to_string())? > 0 {
            return Ok(0);
        }
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for file in &files {
            let at = file.display();
            let text = std::fs::read_to_string(file).map_err(|e| format!("{at}: {e}"))?;
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{at}: {e}"))?;
            let profile = headroom_core::calibration::from_value(
                &value,
                &headroom_core::calibration::Identity::default(),
            )
            .map_err(|e| format!("{at}: {e}"))?;
            let mut profile = profile;
            headroom_core::calibration::recompute(&profile)
                .map_err(|e| format!("{at}: {e}"))?
                .apply_to(&mut profile);
            let canonical = serde_json::to_string(&profile).map_err(|e| e.to_string())?;
            let key = format!(
                "seed:{}",
                file.file_name().unwrap_or_default().to_string_lossy()
            );
            let seeded = db::Uploader {
                token: None,
                status: db::Status::Approved,
                quota: None,
                day: 0,
            };
            self.db
                .insert(&profile, &canonical, Some(&key), &seeded)
                .map_err(|e| format!("{at}: {e}"))?;
        }
        Ok(files.len())
    }
}

/// The routes: the API under `/api/v1/`, the page everywhere else.
pub fn router(app: Arc<App>) -> Router {
    let api = Router::new()
        .route("/api/v1/profiles", get(api::list).post(api::upload))
        .route("/api/v1/profiles/{id}", get(api::one))
        .route("/api/v1/health", get(api::health))
        .method_not_allowed_fallback(api::method_not_allowed);
    api.fallback(page::serve)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            headers,
        ))
        .with_state(app)
}

/// Serves `app` on `listener` until Ctrl-C or SIGTERM, within `limits`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    limits: server::Limits,
) -> std::io::Result<()> {
    server::serve(listener, router(app), limits, shutdown()).await
}

/// Ctrl-C or SIGTERM.
pub async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// Whether a browser origin is this machine (`http://localhost:8080`,
/// `http://127.0.0.1:PORT`, `http://[::1]:PORT`, or https).
pub fn local_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let (host, port) = if let Some(v6) = rest.strip_prefix("[::1]") {
        ("[::1]", v6)
    } else {
        match rest.find(':') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        }
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
        });
    port_ok && ["localhost", "127.0.0.1", "[::1]"].contains(&host)
}

/// CORS, and the headers every answer carries. A page served from this
/// machine may call the whole API; a page anywhere else may read it (`GET`:
/// the listing and the profiles, which hold nothing private) but not upload.
async fn headers(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api/");
    let writes = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if writes {
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let host = req
                .headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok());
            let ours = origin
                .to_str()
                .is_ok_and(|o| same_origin(o, host, app.public_origin.as_deref()));
            if !ours {
                let mut resp = api::ApiError::forbidden(
                    "a page of another site may not write to this registry (its `Origin` is not this registry's own; with a proxy in front, start the registry with --public-url)",
                    "Origin",
                )
                .into_response();
                resp.headers_mut().insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                );
                return resp;
            }
        }
    }
    let cross_origin = api && req.headers().contains_key(header::ORIGIN);
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| api && local_origin(o))
        .and_then(|o| HeaderValue::from_str(o).ok());
    let read = matches!(*req.method(), Method::GET | Method::HEAD);
    let preflight = api && req.method() == Method::OPTIONS;
    let mut resp = if preflight {
        axum::http::StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if api {
        h.append(header::VARY, HeaderValue::from_static("Origin"));
    }
    if let Some(origin) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        if preflight {
            h.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            h.insert(
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("Content-Type, Idempotency-Key"),
            );
            h.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        } else {
            h.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("Location, Retry-After"),
            );
        }
    } else if cross_origin && read {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::{local_origin, same_origin};

    #[test]
    fn only_the_registry_itself_is_its_origin() {
        let host = Some("profiles.example:8090");
        assert!(same_origin("http://profiles.example:8090", host, None));
        assert!(same_origin("https://profiles.example:8090", host, None));
        assert!(!same_origin("https://evil.example", host, None));
        assert!(!same_origin(
            "http://profiles.example.evil:8090",
            host,
            None
        ));
        assert!(!same_origin("null", host, None));
        let public = Some("https://profiles.example");
        assert!(same_origin(
            "https://profiles.example",
            Some("10.0.0.5:8090"),
            public
        ));
        assert!(same_origin(
            "https://profiles.example:443",
            Some("10.0.0.5:8090"),
            public
        ));
        assert!(!same_origin(
            "http://evil.example",
            Some("10.0.0.5:8090"),
            public
        ));
        // A page on this machine may write to a registry reached as localhost.
        assert!(same_origin(
            "http://localhost:8080",
            Some("127.0.0.1:8090"),
            None
        ));
        assert!(!same_origin(
            "http://localhost:8080",
            Some("profiles.example"),
            None
        ));
    }

    #[test]
    fn only_this_machine_is_a_local_origin() {
        for ok in [
            "http://localhost",
            "http://localhost:8080",
            "http://127.0.0.1:8090",
            "https://127.0.0.1",
            "http://[::1]:8080",
        ] {
            assert!(local_origin(ok), "{ok}");
        }
        for bad in [
            "http://localhost.evil.example",
            "http://127.0.0.1.evil.example",
            "http://evil.example",
            "http://localhost:80/x",
            "http://localhost:",
            "null",
            "file://",
            "http://[::1]x",
        ] {
            assert!(!local_origin(bad), "{bad}");
        }
    }
}
