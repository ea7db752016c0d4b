//! `headroom upload PROFILE --to URL`: validate, then POST the
//! profile as JSON, retrying with backoff. The local file is only read.
//!
//! Contract (see the README): `POST URL`, `Content-Type: application/json`,
//! body = the validated profile re-serialised (schema_version 1; nothing but
//! the schema's fields: no host name, user name or file path). 200, 201 or
//! 202 with the registry's JSON answer (`{"id": ...}`) = accepted (the same
//! statuses with any other body = failed, exit 4); 408, 429 and 5xx = retried (honouring `Retry-After`);
//! a redirect (3xx) is never followed; any other status = rejected, not
//! retried. Credentials in the URL are sent (HTTP Basic) but never shown,
//! and what the server says is shown escaped and cut.

use crate::error::{CollectorError, Result};
use crate::profile::{self, printable, Identity, Profile};
use std::io::Read;
use std::time::Duration;

/// Most retries (`--retries`).
pub const MAX_RETRIES: u64 = 20;
/// Longest per-attempt timeout, seconds (`--timeout-s`).
pub const MAX_TIMEOUT_S: u64 = 600;
/// Longest `--to` URL.
pub const MAX_URL_CHARS: usize = 2048;
/// Most bytes of a server's answer read.
pub const MAX_RESPONSE_BYTES: u64 = 64 << 10;
/// Most bytes of a server's answer printed (escaped).
pub const MAX_SHOWN_BYTES: usize = 2048;

/// A whole number in `[min, max]` for a flag (`unit` names what it counts).
/// Any other text, a number out of range or one too large for 64 bits is
/// refused as the user typed it, with the range (exit 1).
fn bounded(text: &str, min: u64, max: u64, unit: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let shown = printable(t, 40);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{shown}` is not a whole number; allowed: {min} to {max} ({unit})"
        ));
    }
    match t.parse::<u64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{shown}` is out of range; allowed: {min} to {max} ({unit})"
        )),
    }
}

fn retries_flag(text: &str) -> std::result::Result<u64, String> {
    bounded(text, 0, MAX_RETRIES, "retries after the first attempt")
}

fn timeout_flag(text: &str) -> std::result::Result<u64, String> {
    bounded(text, 1, MAX_TIMEOUT_S, "seconds per attempt")
}

fn backoff_flag(text: &str) -> std::result::Result<u64, String> {
    bounded(text, 0, MAX_BACKOFF_MS, "milliseconds")
}

/// Allowed `--backoff-ms`: 0 to 60,000 (a minute).
pub const MAX_BACKOFF_MS: u64 = 60_000;

/// Options of `upload` (its command-line flags).
#[derive(Clone, Debug, clap::Args)]
pub struct UploadArgs {
    /// The profile file (`-`: standard input; at most 16 MiB).
    pub profile: String,
    /// Where to POST it: http(s)://host[:port]/path (credentials as
    /// user:password@host are sent, never shown).
    #[arg(long)]
    pub to: String,
    /// Show what would be sent; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Retries after the first attempt (on connection errors, 408, 429, 5xx): 0 to 20.
    #[arg(long, default_value_t = 4, value_parser = retries_flag)]
    pub retries: u64,
    /// First backoff in milliseconds, 0 to 60000 (doubles each retry, at most 30 s).
    #[arg(long, default_value_t = 1000, value_parser = backoff_flag)]
    pub backoff_ms: u64,
    /// Per-attempt timeout in seconds: 1 to 600.
    #[arg(long, default_value_t = 30, value_parser = timeout_flag)]
    pub timeout_s: u64,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// The upload token the registry's operator gave you (default: the
    /// HEADROOM_TOKEN environment variable); sent as `Authorization:
    /// Bearer`, never printed.
    #[arg(long)]
    pub token: Option<String>,
}

/// The environment variable `upload` reads a token from when `--token` is
/// not given.
pub const TOKEN_ENV: &str = "HEADROOM_TOKEN";

/// The token to send: `--token`, else [`TOKEN_ENV`]; checked to be one
/// header value (visible ASCII, no spaces), at most 256 characters.
fn token(args: &UploadArgs) -> Result<Option<String>> {
    let (given, source) = match &args.token {
        Some(t) => (Some(t.clone()), "--token"),
        None => (std::env::var(TOKEN_ENV).ok(), TOKEN_ENV),
    };
    let Some(t) = given
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
    else {
        return Ok(None);
    };
    if t.len() > 256 || !t.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(CollectorError::input(format!(
            "`{source}`: not a token (it has spaces, control or non-ASCII characters, or is over 256 characters); allowed: the token the registry's operator gave you, as printed by `headroom-registry token add`"
        )));
    }
    Ok(Some(t))
}

impl Default for UploadArgs {
    fn default() -> Self {
        UploadArgs {
            profile: String::new(),
            to: String::new(),
            dry_run: false,
            retries: 4,
            backoff_ms: 1000,
            timeout_s: 30,
            json: false,
            token: None,
        }
    }
}

/// What happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UploadOutcome {
    /// The URL, credentials shown as `***`.
    pub url: String,
    /// Attempts made.
    pub attempts: u32,
    /// Final HTTP status.
    pub status: u16,
    /// The server's answer (JSON if it was JSON of at most 2 KB, else text),
    /// control characters escaped.
    pub response: serde_json::Value,
    /// Bytes sent.
    pub payload_bytes: usize,
}

/// The body that would be sent.
pub fn payload(profile: &Profile) -> Vec<u8> {
    serde_json::to_vec(profile).expect("profile serialises")
}

/// FNV-1a 64 of the payload: an idempotency key for retried uploads.
pub fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `--to`, checked: the URL to send to, the URL to show and the
/// credentials it carries (never printed).
#[derive(Clone, Debug)]
pub struct Target {
    /// As given.
    pub url: String,
    /// With any `user:password@` shown as `***@`.
    pub shown: String,
    /// `user:password`, the password: scrubbed from any message.
    secrets: Vec<String>,
}

impl Target {
    /// `text` with the URL's credentials replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            out = out.replace(s.as_str(), "***");
        }
        out
    }

    /// Whether the URL carries credentials.
    pub fn has_credentials(&self) -> bool {
        !self.secrets.is_empty()
    }
}

/// `url` with anything before an `@` in its host part shown as `***`
/// (works on malformed input too).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}***{}", &rest[at..]),
        None => url.to_string(),
    }
}

/// Checks `--to`: http(s)://host[:port]/path, nothing else.
pub fn parse_target(url: &str) -> Result<Target> {
    let shown = redact_url(url);
    let bad = |why: &str| {
        CollectorError::input(format!(
            "--to: `{}` is not a URL to upload to: {why}; allowed: http(s)://host[:port]/path",
            printable(&shown, 200)
        ))
    };
    if url.chars().count() > MAX_URL_CHARS {
        return Err(bad(&format!("longer than {MAX_URL_CHARS} characters")));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it contains spaces or control characters"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("no scheme (http:// or https://)"));
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(bad(&format!(
            "the scheme is `{}`, not http or https",
            printable(scheme, 20)
        )));
    }
    if rest.contains('#') {
        return Err(bad("a fragment (#...) is not sent"));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err(bad("an IPv6 address without its closing `]`"));
        };
        if addr.is_empty()
            || !addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(bad("not an IPv6 address in [...]"));
        }
        match after {
            "" => (host_port, None),
            p => match p.strip_prefix(':') {
                Some(port) => (&host_port[..host_port.len() - p.len()], Some(port)),
                None => return Err(bad("text after the IPv6 address")),
            },
        }
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !host.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
    {
        return Err(bad("the host has characters a host name cannot have"));
    }
    if let Some(p) = port {
        let ok = !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && (1..=65535).contains(&p.parse::<u32>().unwrap_or(0));
        if !ok {
            return Err(bad("the port is not a number from 1 to 65535"));
        }
    }
    if url.parse::<ureq::http::Uri>().is_err() {
        return Err(bad("it does not parse as a URI"));
    }
    let mut secrets = Vec::new();
    if let Some(info) = userinfo.filter(|u| !u.is_empty()) {
        secrets.push(info.to_string());
        if let Some((_, password)) = info.split_once(':') {
            if password.len() >= 3 {
                secrets.push(password.to_string());
            }
        }
    }
    Ok(Target {
        url: url.to_string(),
        shown,
        secrets,
    })
}

/// Checks `--retries`, `--timeout-s` and `--backoff-ms`.
fn check_limits(args: &UploadArgs) -> Result<()> {
    if !(1..=MAX_TIMEOUT_S).contains(&args.timeout_s) {
        return Err(CollectorError::input(format!(
            "--timeout-s: {} is out of range; allowed: 1 to {MAX_TIMEOUT_S} (seconds per attempt)",
            args.timeout_s
        )));
    }
    if args.retries > MAX_RETRIES {
        return Err(CollectorError::input(format!(
            "--retries: {} is out of range; allowed: 0 to {MAX_RETRIES}",
            args.retries
        )));
    }
    if args.backoff_ms > MAX_BACKOFF_MS {
        return Err(CollectorError::input(format!(
            "--backoff-ms: {} is out of range; allowed: 0 to {MAX_BACKOFF_MS} (milliseconds)",
            args.backoff_ms
        )));
    }
    Ok(())
}

/// Reads and validates the profile (the file is never written; at most
/// [`profile::MAX_PROFILE_BYTES`] are read).
pub fn load(path: &str, identity: &Identity) -> Result<Profile> {
    let text = profile::read_text(path)?;
    let name = if path == "-" { "(stdin)" } else { path };
    profile::parse(&text, identity).map_err(|e| CollectorError::input(format!("{name}: {e}")))
}

/// The `--dry-run` text (any credentials in `url` and the token shown as
/// `***`).
pub fn render_dry_run(url: &str, body: &[u8], with_token: bool) -> String {
    let pretty: serde_json::Value = serde_json::from_slice(body).expect("our own JSON");
    let shown = redact_url(url);
    let auth = if with_token {
        "Authorization: Bearer *** (the upload token)\n"
    } else if shown != url {
        "Authorization: Basic *** (the URL's credentials)\n"
    } else {
        ""
    };
    format!(
        "POST {}\nContent-Type: application/json\nUser-Agent: {}\nIdempotency-Key: {}\nContent-Length: {}\n{auth}\n{}\n",
        printable(&shown, MAX_URL_CHARS),
        user_agent(),
        digest(body),
        body.len(),
        serde_json::to_string_pretty(&pretty).expect("serialises")
    )
}

fn user_agent() -> String {
    format!(
        "headroom-calibration-collector/{}",
        env!("CARGO_PKG_VERSION")
    )
}

enum Attempt {
    Done(u16, Vec<u8>),
    /// An `https://` target that does not speak TLS (a plain-HTTP port):
    /// retrying cannot help.
    NotTls(String),
    Retry(String, Option<Duration>),
    Rejected(u16, Vec<u8>),
    Redirected(u16, Option<String>),
}

/// Whether a connection error is what TLS meets on a plain-HTTP port: the
/// server answers the handshake with HTTP text, or closes the connection.
fn looks_like_no_tls(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    [
        "corrupt message",
        "invalidcontenttype",
        "unexpected end of file",
        "handshake",
        "wrong version number",
    ]
    .iter()
    .any(|needle| e.contains(needle))
}

fn retry_after(resp: &ureq::http::Response<ureq::Body>) -> Option<Duration> {
    let secs: u64 = resp
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(30)))
}

/// The agent: one timeout per attempt, statuses as answers, no redirects
/// followed (a 3xx comes back as it is).
fn agent(timeout_s: u64) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(timeout_s)))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

fn attempt(agent: &ureq::Agent, url: &str, body: &[u8], token: Option<&str>) -> Attempt {
    let mut request = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .header("User-Agent", &user_agent())
        .header("Idempotency-Key", &digest(body));
    if let Some(t) = token {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let result = request.send(body);
    match result {
        Err(e) if url.starts_with("https://") && looks_like_no_tls(&e.to_string()) => {
            Attempt::NotTls(e.to_string())
        }
        Err(e) => Attempt::Retry(e.to_string(), None),
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let wait = retry_after(&resp);
            let location = resp
                .headers()
                .get("location")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let mut text = Vec::new();
            // What was read before an error is kept; the rest is not needed.
            let _ = resp
                .body_mut()
                .as_reader()
                .take(MAX_RESPONSE_BYTES)
                .read_to_end(&mut text);
            match status {
                200..=202 => Attempt::Done(status, text),
                301..=303 | 307 | 308 => Attempt::Redirected(status, location),
                408 | 429 | 500..=599 => {
                    Attempt::Retry(format!("HTTP {status}: {}", server_text(&text)), wait)
                }
                _ => Attempt::Rejected(status, text),
            }
        }
    }
}

/// What a server said, safe to print: control and invisible characters
/// escaped, at most [`MAX_SHOWN_BYTES`] printed, and a note when cut.
pub fn server_text(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let piece = printable(c.encode_utf8(&mut [0; 4]), 1);
        if out.len() + piece.len() > MAX_SHOWN_BYTES {
            break;
        }
        out.push_str(&piece);
        used += c.len_utf8();
    }
    if used < text.len() {
        let total = if body.len() as u64 >= MAX_RESPONSE_BYTES {
            format!("more than {MAX_RESPONSE_BYTES}")
        } else {
            text.len().to_string()
        };
        out.push_str(&format!(
            " [cut: {used} of {total} bytes of the answer shown]"
        ));
    }
    out
}

/// A JSON answer with the characters a terminal would act on (and which
/// JSON printing leaves raw: DEL, C1 controls, bidirectional overrides)
/// escaped in its strings and keys.
fn inert(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let clean = |s: &str| {
        if s.chars().any(profile::is_unsafe_char) {
            printable(s, usize::MAX)
        } else {
            s.to_string()
        }
    };
    match v {
        Value::String(s) => Value::String(clean(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(inert).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (clean(&k), inert(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The id a registry gives a stored profile (`{"id": ..., ...}`): a
/// non-empty string or a whole number; `None` for any other answer (an
/// HTML page, an empty body, a proxy's text).
fn stored_id(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    match v.get("id")? {
        serde_json::Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) if n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// The accepted answer as the outcome shows it.
fn response_value(body: &[u8]) -> serde_json::Value {
    if body.len() <= MAX_SHOWN_BYTES {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
            return inert(v);
        }
    }
    serde_json::Value::String(server_text(body))
}

/// Runs `upload`: `Ok(None)` with the dry-run text, `Ok(Some)` once accepted.
pub fn run(
    args: &UploadArgs,
    identity: &Identity,
) -> Result<(Option<UploadOutcome>, Option<String>)> {
    check_limits(args)?;
    let mut target = parse_target(&args.to)?;
    let token = token(args)?;
    if let Some(t) = &token {
        // Scrubbed from every message, as the URL's password is.
        target.secrets.push(t.clone());
    }
    let profile = load(&args.profile, identity)?;
    let body = payload(&profile);
    if args.dry_run {
        return Ok((
            None,
            Some(render_dry_run(&target.url, &body, token.is_some())),
        ));
    }
    let agent = agent(args.timeout_s);
    let attempts = args.retries as u32 + 1;
    let shown = printable(&target.shown, MAX_URL_CHARS);
    let mut last = String::new();
    for n in 1..=attempts {
        match attempt(&agent, &target.url, &body, token.as_deref()) {
            Attempt::Done(status, text) => {
                if stored_id(&text).is_none() {
                    return Err(CollectorError::Upload(target.scrub(&format!(
                        "the server answered HTTP {status} but not as a profile registry does (a JSON object with the stored profile's `id`): {}; the profile may not be stored; check --to (a headroom-registry's /api/v1/profiles); {} was not changed",
                        server_text(&text),
                        args.profile
                    ))));
                }
                return Ok((
                    Some(UploadOutcome {
                        url: shown,
                        attempts: n,
                        status,
                        response: response_value(&text),
                        payload_bytes: body.len(),
                    }),
                    None,
                ));
            }
            Attempt::NotTls(why) => {
                return Err(CollectorError::Upload(target.scrub(&format!(
                    "the TLS handshake with the server failed ({}): is it a plain-HTTP port? then give --to as http://...; not retried; {} was not changed",
                    printable(&why, 300),
                    args.profile
                ))))
            }
            Attempt::Rejected(status, text) => {
                let hint = match (status, &token) {
                    (401, None) => format!("; the registry takes uploads with a token: pass --token TOKEN or set {TOKEN_ENV}"),
                    (401, Some(_)) => "; the registry does not know this token (ask its operator for a new one)".to_string(),
                    _ => String::new(),
                };
                return Err(CollectorError::Upload(target.scrub(&format!(
                    "the server rejected the profile (HTTP {status}): {}{hint}; {} was not changed",
                    server_text(&text),
                    args.profile
                ))));
            }
            Attempt::Redirected(status, location) => {
                let to = match location {
                    Some(l) => format!("to `{}`", printable(&redact_url(&l), 300)),
                    None => "without a Location header".to_string(),
                };
                return Err(CollectorError::Upload(target.scrub(&format!(
                    "the server answered with a redirect (HTTP {status}) {to}; redirects are not followed (the profile is sent only where --to says); if that is the server, pass it as --to; {} was not changed",
                    args.profile
                ))));
            }
            Attempt::Retry(why, wait) => {
                last = printable(&target.scrub(&why), MAX_SHOWN_BYTES + 100);
                if n < attempts {
                    let backoff =
                        Duration::from_millis(args.backoff_ms.saturating_mul(1 << (n - 1).min(16)))
                            .min(Duration::from_secs(30));
                    eprintln!(
                        "upload attempt {n}/{attempts} failed ({last}); retrying in {:.1} s",
                        wait.unwrap_or(backoff).as_secs_f64()
                    );
                    std::thread::sleep(wait.unwrap_or(backoff));
                }
            }
        }
    }
    Err(CollectorError::Upload(format!(
        "upload failed after {attempts} attempt(s) (last: {last}); {} was not changed; try again later, or contribute it by pull request (calibration-collector/README.md)",
        args.profile
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        assert!(parse_target("https://example.org/api/profiles").is_ok());
        assert!(parse_target("http://127.0.0.1:8080/x").is_ok());
        assert!(parse_target("http://[::1]:8080/x").is_ok());
        assert!(parse_target("ftp://x").is_err());
        assert!(parse_target("https://a b").is_err());
        assert!(parse_target("http://").is_err());
        assert!(parse_target("http:/x").is_err());
        let t = parse_target("http://alice:pw123@example.org:8080/x").unwrap();
        assert_eq!(t.shown, "http://***@example.org:8080/x");
        assert!(t.has_credentials());
        assert_eq!(t.scrub("at alice:pw123 and pw123"), "at *** and ***");
    }

    #[test]
    fn server_text_is_inert_and_short() {
        let shown = server_text("\u{1b}[2Jhi\u{9b}".as_bytes());
        assert_eq!(shown, "\\u{1b}[2Jhi\\u{9b}");
        let long = server_text(&[b'x'; 5000]);
        assert!(long.len() < MAX_SHOWN_BYTES + 100 && long.contains("cut: 2048 of 5000"));
        assert_eq!(server_text(b"  "), "(empty body)");
    }

    #[test]
    fn digest_is_stable() {
        assert_eq!(digest(b""), "cbf29ce484222325");
        assert_ne!(digest(b"a"), digest(b"b"));
    }
}
