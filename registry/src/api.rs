//! The JSON API: `POST /api/v1/profiles`, `GET /api/v1/profiles`,
//! `GET /api/v1/profiles/{id}`, `GET /api/v1/health`. Every error is
//! `{"error": "...", "field": "..."}` (`field` null when no field is to
//! blame).

use crate::db::{profile_url, sha256_hex, DbError, Shown, Status, Stored, Uploader};
use crate::{App, MAX_BODY_BYTES};
use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use headroom_core::calibration::{self as profile, Identity, ProfileError};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes of a refused body read (and dropped) before answering, so the
/// client reads the answer instead of a reset connection: the collector's
/// own limit.
const MAX_DRAIN_BYTES: usize = profile::MAX_PROFILE_BYTES;
/// Longest time to receive a body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest time spent reading a refused body.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest `Idempotency-Key`.
const MAX_KEY_CHARS: usize = 128;
/// Default and largest page of the listing.
const DEFAULT_LIMIT: i64 = 100;
const MAX_LIMIT: i64 = 1000;
/// Longest `gpu` filter.
const MAX_FILTER_CHARS: usize = 128;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    error: String,
    field: Option<String>,
    retry_after: Option<u64>,
    /// `WWW-Authenticate: Bearer` (a 401).
    challenge: bool,
}

impl ApiError {
    /// 403 naming the header to blame.
    pub fn forbidden(error: &str, field: &str) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, error, Some(field))
    }

    fn new(status: StatusCode, error: impl Into<String>, field: Option<&str>) -> ApiError {
        ApiError {
            status,
            error: error.into(),
            field: field.map(str::to_string),
            retry_after: None,
            challenge: false,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let v = json!({"error": self.error, "field": self.field});
        let mut resp = json_response(self.status, &v, "no-store");
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.challenge {
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"headroom-registry\""),
            );
        }
        resp
    }
}

/// JSON text with `<`, `>` and `&` written as `\u003c`, `\u003e` and
/// `\u0026` (the same JSON): what profiles and error messages echo can
/// never read as markup, even where a page pastes the answer into HTML.
pub fn inert_json(text: String) -> String {
    if text.contains(['<', '>', '&']) {
        text.replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026")
    } else {
        text
    }
}

fn json_text(status: StatusCode, text: String, cache: &'static str) -> Response {
    let mut resp = (status, inert_json(text)).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    resp
}

fn json_response(status: StatusCode, v: &Value, cache: &'static str) -> Response {
    json_text(status, v.to_string(), cache)
}

/// The collector's refusal as an answer: 413 for size, 400 for JSON that
/// does not parse, 422 for a profile that breaks the schema, naming the
/// field.
fn refused(e: ProfileError) -> ApiError {
    match &e {
        ProfileError::TooLarge(_) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            e.to_string(),
            Some("(document)"),
        ),
        ProfileError::Json(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, e.to_string(), Some("(document)"))
        }
        ProfileError::Field { field, .. } => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string(), Some(field))
        }
    }
}

fn internal(e: DbError) -> ApiError {
    eprintln!("headroom-registry: database error: {e}");
    let busy = matches!(
        &e,
        DbError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        let mut err = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the database is busy; try again",
            None,
        );
        err.retry_after = Some(1);
        err
    } else {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the database failed",
            None,
        )
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DbError> + Send + 'static,
) -> Result<T, DbError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(DbError::Schema(format!("a database task failed: {e}"))),
    }
}

/// The `Authorization: Bearer TOKEN` header's token, if well formed.
fn bearer(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        let mut e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("{why}; allowed: one `Authorization: Bearer TOKEN` header with a token the registry's operator issued (`headroom upload --token`)"),
            Some("Authorization"),
        );
        e.challenge = true;
        e
    };
    if values.next().is_some() {
        return Err(bad("the header is given more than once"));
    }
    let text = value
        .to_str()
        .map_err(|_| bad("the header is not visible ASCII"))?;
    let (scheme, token) = text.trim().split_once(' ').unwrap_or((text, ""));
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.len() > 256 {
        return Err(bad("the header is not `Bearer TOKEN`"));
    }
    Ok(Some(token.to_string()))
}

/// Who uploads: on an `--open` registry anyone (approved at once, no
/// quota); else the holder of a live token (pending, within its quota).
async fn uploader(app: &Arc<App>, headers: &HeaderMap) -> Result<Uploader, ApiError> {
    let day = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        / 86_400) as i64;
    if app.open {
        return Ok(Uploader {
            token: None,
            status: Status::Approved,
            quota: None,
            day,
        });
    }
    let unauthorized = |why: &str| {
        let mut e = ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!("{why}; allowed: `Authorization: Bearer TOKEN` with a token the registry's operator issued (`headroom upload --token TOKEN` or HEADROOM_TOKEN)"),
            Some("Authorization"),
        );
        e.challenge = true;
        e
    };
    let Some(token) = bearer(headers)? else {
        return Err(unauthorized(
            "this registry takes uploads with a token only",
        ));
    };
    let hash = sha256_hex(token.as_bytes());
    let app2 = Arc::clone(app);
    match blocking(move || app2.db.token_id(&hash)).await {
        Ok(Some(id)) => Ok(Uploader {
            token: Some(id),
            status: Status::Pending,
            quota: Some(app.quota),
            day,
        }),
        Ok(None) => Err(unauthorized(
            "the token is not one of this registry's (or was revoked)",
        )),
        Err(e) => Err(internal(e)),
    }
}

/// Seconds until the next UTC midnight, when quotas start again.
fn until_tomorrow() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    86_400 - now % 86_400
}

enum Read {
    Body(Vec<u8>),
    TooLarge,
    Failed(String),
}

/// Reads at most `limit` bytes of `body`; past that reads on (dropping what
/// it reads) up to [`MAX_DRAIN_BYTES`] in all, so the client gets the 413.
async fn read_body(mut body: Body, limit: usize) -> Read {
    let read = async {
        let mut buf = Vec::new();
        let mut seen = 0usize;
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
            match frame {
                None => break,
                Some(Err(e)) => return Read::Failed(e.to_string()),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        seen = seen.saturating_add(data.len());
                        if seen > MAX_DRAIN_BYTES {
                            return Read::TooLarge;
                        }
                        if seen <= limit {
                            buf.extend_from_slice(&data);
                        }
                    }
                }
            }
        }
        if seen > limit {
            Read::TooLarge
        } else {
            Read::Body(buf)
        }
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => Read::Failed(format!(
            "the body did not arrive within {} s",
            BODY_TIMEOUT.as_secs()
        )),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the body is larger than this registry takes; allowed: at most {MAX_BODY_BYTES} bytes"
        ),
        Some("(document)"),
    )
}

/// The `Idempotency-Key` header, checked: 1 to 128 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("{why}; allowed: one key of 1 to {MAX_KEY_CHARS} visible ASCII characters"),
            Some("Idempotency-Key"),
        )
    };
    if values.next().is_some() {
        return Err(bad("the header is given more than once"));
    }
    let key = value
        .to_str()
        .map_err(|_| bad("the key is not visible ASCII"))?
        .trim();
    if key.is_empty() || key.len() > MAX_KEY_CHARS || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "the key is empty, too long or has spaces or control characters",
        ));
    }
    Ok(Some(key.to_string()))
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// `POST /api/v1/profiles`: checks, then stores one profile.
pub async fn upload(
    State(app): State<Arc<App>>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match receive(&app, client, &headers, body).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

/// What can be refused before the body is read: the rate, the content type,
/// the key and the declared length. `Ok` holds the key.
fn precheck(
    app: &App,
    client: SocketAddr,
    headers: &HeaderMap,
) -> Result<Option<String>, ApiError> {
    if let Err(wait) = app.limiter.check(client.ip(), Instant::now()) {
        let secs = wait.as_secs().max(1);
        let mut err = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("too many uploads from this address; try again in {secs} s"),
            None,
        );
        err.retry_after = Some(secs);
        return Err(err);
    }
    if !is_json(headers) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be a calibration profile sent as application/json",
            Some("Content-Type"),
        ));
    }
    let key = idempotency_key(headers)?;
    if declared_length(headers).is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(too_large());
    }
    Ok(key)
}

async fn receive(
    app: &Arc<App>,
    client: SocketAddr,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let checked = match precheck(app, client, headers) {
        Ok(key) => match uploader(app, headers).await {
            Ok(who) => Ok((key, who)),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let (key, who) = match checked {
        Ok(key) => key,
        Err(e) => {
            // The body is still read (up to a limit) so that the client
            // sees this answer rather than a reset connection; unless the
            // client waits for a `100 Continue` before sending it, or
            // announced more than would be read anyway.
            let waits = headers
                .get(header::EXPECT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
            if !waits && declared_length(headers).is_none_or(|n| n <= MAX_DRAIN_BYTES as u64) {
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, read_body(body, 0)).await;
            }
            return Err(e);
        }
    };
    let bytes = match read_body(body, MAX_BODY_BYTES).await {
        Read::Body(b) => b,
        Read::TooLarge => return Err(too_large()),
        Read::Failed(why) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("the body could not be read: {why}"),
                Some("(document)"),
            ))
        }
    };
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| refused(ProfileError::Json(e.to_string())))?;
    // The core's checks, which the collector runs too; the registry has no
    // identity to hide, so only what any profile may not hold (paths,
    // addresses) is scanned for.
    let mut profile = profile::from_value(&value, &Identity::default()).map_err(refused)?;
    drop(value);
    // The accuracy claims, recomputed from the points with the core: what
    // is stored and listed is what the registry computed, never the
    // uploader's figures (`recomputed` names the claims that differed).
    let slot = app.recompute_slots.acquire().await.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the registry is stopping",
            None,
        )
    })?;
    let (recomputed, profile) = tokio::task::spawn_blocking(move || {
        let ours = profile::recompute(&profile)?;
        let differed = ours.differences(&profile);
        ours.apply_to(&mut profile);
        Ok::<_, ProfileError>((differed, profile))
    })
    .await
    .map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("recomputing the profile failed: {e}"),
            None,
        )
    })?
    .map_err(refused)?;
    drop(slot);
    let canonical = serde_json::to_string(&profile).expect("a profile serialises");
    let app2 = Arc::clone(app);
    let stored = blocking(move || app2.db.insert(&profile, &canonical, key.as_deref(), &who)).await;
    let (status, id) = match stored {
        Ok(Stored::Created(id)) => (StatusCode::CREATED, id),
        Ok(Stored::Replayed(id)) => (StatusCode::OK, id),
        Err(DbError::Quota(why)) => {
            let mut err = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("the token's daily allowance is spent: {why}"),
                Some("Authorization"),
            );
            err.retry_after = Some(until_tomorrow());
            return Err(err);
        }
        Err(DbError::Conflict(id)) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "this Idempotency-Key was used for another profile ({}); send a new key for a new profile",
                    profile_url(id)
                ),
                Some("Idempotency-Key"),
            ))
        }
        Err(e) => return Err(internal(e)),
    };
    let url = profile_url(id);
    let app2 = Arc::clone(app);
    let review = blocking(move || app2.db.status(id))
        .await
        .map_err(internal)?
        .unwrap_or(Status::Pending);
    let mut resp = json_response(
        status,
        &json!({"id": id, "url": url, "status": review, "recomputed": recomputed}),
        "no-store",
    );
    if let Ok(v) = HeaderValue::from_str(&url) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    Ok(resp)
}

fn query_error(name: &str, why: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, why, Some(name))
}

/// Decodes one `application/x-www-form-urlencoded` component.
fn decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

struct ListQuery {
    gpu: Option<String>,
    status: Shown,
    limit: i64,
    offset: i64,
}

fn parse_query(raw: Option<&str>) -> Result<ListQuery, ApiError> {
    let mut q = ListQuery {
        gpu: None,
        status: Shown::Approved,
        limit: DEFAULT_LIMIT,
        offset: 0,
    };
    let mut seen = Vec::new();
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (Some(k), Some(v)) = (decode(k), decode(v)) else {
            return Err(query_error(
                "(query)",
                "the query is not valid URL encoding".into(),
            ));
        };
        let shown: String = k.chars().filter(|c| !c.is_control()).take(40).collect();
        if seen.contains(&k) {
            return Err(query_error(
                &shown,
                format!("`{shown}` is given more than once"),
            ));
        }
        let number = |max: i64| {
            v.parse::<i64>()
                .ok()
                .filter(|n| (0..=max).contains(n))
                .ok_or_else(|| {
                    query_error(
                        &shown,
                        format!("`{shown}` must be a whole number from 0 to {max}"),
                    )
                })
        };
        match k.as_str() {
            "gpu" => {
                if v.chars().count() > MAX_FILTER_CHARS || v.chars().any(char::is_control) {
                    return Err(query_error(
                        "gpu",
                        format!("`gpu` must be text of at most {MAX_FILTER_CHARS} characters without control characters"),
                    ));
                }
                q.gpu = Some(v.trim().to_string()).filter(|s| !s.is_empty());
            }
            "status" => {
                q.status = match v.as_str() {
                    "approved" => Shown::Approved,
                    "pending" => Shown::Pending,
                    "all" => Shown::All,
                    _ => {
                        return Err(query_error(
                            "status",
                            "`status` must be approved, pending or all".to_string(),
                        ))
                    }
                }
            }
            "limit" => q.limit = number(MAX_LIMIT)?.max(1),
            "offset" => q.offset = number(i64::from(u32::MAX))?,
            _ => {
                return Err(query_error(
                    &shown,
                    format!(
                        "unknown query parameter `{shown}`; allowed: gpu, status, limit, offset"
                    ),
                ))
            }
        }
        seen.push(k);
    }
    Ok(q)
}

/// `GET /api/v1/profiles[?gpu=H200&limit=100&offset=0]`: newest first.
pub async fn list(State(app): State<Arc<App>>, RawQuery(raw): RawQuery) -> Response {
    let q = match parse_query(raw.as_deref()) {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    let app2 = Arc::clone(&app);
    let gpu = q.gpu.clone();
    let (shown, limit, offset) = (q.status, q.limit, q.offset);
    match blocking(move || app2.db.list(gpu.as_deref(), shown, limit, offset)).await {
        Ok((profiles, total)) => json_response(
            StatusCode::OK,
            &json!({"profiles": profiles, "total": total, "limit": limit, "offset": offset}),
            "no-cache",
        ),
        Err(e) => internal(e).into_response(),
    }
}

/// `GET /api/v1/profiles/{id}`: the profile as uploaded (re-serialised by
/// the schema), usable as a profile file.
pub async fn one(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    let not_found = || {
        let shown: String = id.chars().filter(|c| !c.is_control()).take(40).collect();
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no profile `{shown}`"),
            Some("id"),
        )
        .into_response()
    };
    let Some(n) = id.parse::<i64>().ok().filter(|n| *n > 0) else {
        return not_found();
    };
    let app2 = Arc::clone(&app);
    match blocking(move || app2.db.get(n)).await {
        Ok(Some((body, status))) => {
            let mut resp = json_text(StatusCode::OK, body, "no-cache");
            resp.headers_mut()
                .insert("x-profile-status", HeaderValue::from_static(status.key()));
            resp
        }
        Ok(None) => not_found(),
        Err(e) => internal(e).into_response(),
    }
}

/// `GET /api/v1/health`: `{"status": "ok", "profiles": N, "pending": M}`
/// (listed and waiting for review).
pub async fn health(State(app): State<Arc<App>>) -> Response {
    let app2 = Arc::clone(&app);
    match blocking(move || app2.db.counts()).await {
        Ok((listed, pending)) => json_response(
            StatusCode::OK,
            &json!({"status": "ok", "profiles": listed, "pending": pending}),
            "no-store",
        ),
        Err(e) => internal(e).into_response(),
    }
}

/// A method the route does not take.
pub async fn method_not_allowed() -> Response {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed here; see the registry's README for the endpoints",
        None,
    )
    .into_response()
}

/// An `/api/` path that is not an endpoint.
pub fn not_an_endpoint() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such endpoint; the API is /api/v1/profiles, /api/v1/profiles/{id} and /api/v1/health",
        None,
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_strict() {
        let q = parse_query(Some("gpu=NVIDIA+H200&limit=5&offset=10"))
            .ok()
            .unwrap();
        assert_eq!(q.gpu.as_deref(), Some("NVIDIA H200"));
        assert_eq!((q.limit, q.offset), (5, 10));
        let q = parse_query(Some("gpu=%48200")).ok().unwrap();
        assert_eq!(q.gpu.as_deref(), Some("H200"));
        for (bad, field) in [
            ("limit=x", "limit"),
            ("limit=100000", "limit"),
            ("offset=-1", "offset"),
            ("gpus=h200", "gpus"),
            ("gpu=a&gpu=b", "gpu"),
            ("gpu=%zz", "(query)"),
        ] {
            let e = parse_query(Some(bad)).err().unwrap();
            assert_eq!(e.field.as_deref(), Some(field), "{bad}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn markup_is_escaped_and_the_json_unchanged() {
        let v = json!({"name": "<img src=x onerror=alert(1)> & \\<"});
        let text = inert_json(v.to_string());
        assert!(!text.contains(['<', '>', '&']), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }

    #[test]
    fn keys_are_checked() {
        let mut h = HeaderMap::new();
        assert_eq!(idempotency_key(&h).ok().unwrap(), None);
        h.insert(
            "idempotency-key",
            HeaderValue::from_static("0123abcd0123abcd"),
        );
        assert_eq!(
            idempotency_key(&h).ok().unwrap().as_deref(),
            Some("0123abcd0123abcd")
        );
        h.insert("idempotency-key", HeaderValue::from_static("a b"));
        assert!(idempotency_key(&h).is_err());
        h.insert(
            "idempotency-key",
            HeaderValue::from_str(&"k".repeat(129)).unwrap(),
        );
        assert!(idempotency_key(&h).is_err());
    }
}
