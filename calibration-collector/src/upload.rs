//! `calibration-collector upload PROFILE --to URL`: validate, then POST the
//! profile as JSON, retrying with backoff. The local file is only read.
//!
//! Contract (see the README): `POST URL`, `Content-Type: application/json`,
//! body = the validated profile re-serialised (schema_version 1; nothing but
//! the schema's fields: no host name, user name or file path). 200, 201 or
//! 202 = accepted; 408, 429 and 5xx = retried (honouring `Retry-After`);
//! any other status = rejected, not retried.

use crate::cases::read_text;
use crate::error::{CollectorError, Result};
use crate::profile::{self, Identity, Profile, MAX_PROFILE_BYTES};
use std::time::Duration;

/// Options of `upload` (its command-line flags).
#[derive(Clone, Debug, clap::Args)]
pub struct UploadArgs {
    /// The profile file.
    pub profile: String,
    /// Where to POST it.
    #[arg(long)]
    pub to: String,
    /// Show what would be sent; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Retries after the first attempt (on connection errors, 408, 429, 5xx).
    #[arg(long, default_value_t = 4)]
    pub retries: u32,
    /// First backoff in milliseconds (doubles each retry, at most 30 s).
    #[arg(long, default_value_t = 1000)]
    pub backoff_ms: u64,
    /// Per-attempt timeout in seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout_s: u64,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
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
        }
    }
}

/// What happened.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UploadOutcome {
    /// The URL.
    pub url: String,
    /// Attempts made.
    pub attempts: u32,
    /// Final HTTP status.
    pub status: u16,
    /// The server's answer (JSON if it was JSON, else text).
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

fn check_url(url: &str) -> Result<()> {
    let ok = (url.starts_with("https://") || url.starts_with("http://"))
        && url.len() <= 2048
        && !url.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(CollectorError::input(format!(
            "--to: `{url}` is not a URL; allowed: an http:// or https:// URL"
        )))
    }
}

/// Reads and validates the profile (the file is never written).
pub fn load(path: &str, identity: &Identity) -> Result<Profile> {
    if path != "-" {
        let len = std::fs::metadata(path)
            .map_err(|e| CollectorError::io(path, e))?
            .len();
        if len > MAX_PROFILE_BYTES as u64 {
            return Err(CollectorError::input(format!(
                "{path}: the profile is {len} bytes; allowed: at most {MAX_PROFILE_BYTES} bytes"
            )));
        }
    }
    let text = read_text(path)?;
    profile::parse(&text, identity).map_err(|e| CollectorError::input(format!("{path}: {e}")))
}

/// The `--dry-run` text.
pub fn render_dry_run(url: &str, body: &[u8]) -> String {
    let pretty: serde_json::Value = serde_json::from_slice(body).expect("our own JSON");
    format!(
        "POST {url}\nContent-Type: application/json\nUser-Agent: {}\nIdempotency-Key: {}\nContent-Length: {}\n\n{}\n",
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
    Done(u16, String),
    Retry(String, Option<Duration>),
    Rejected(u16, String),
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

fn attempt(agent: &ureq::Agent, url: &str, body: &[u8]) -> Attempt {
    let result = agent
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json")
        .header("User-Agent", &user_agent())
        .header("Idempotency-Key", &digest(body))
        .send(body);
    match result {
        Err(e) => Attempt::Retry(e.to_string(), None),
        Ok(mut resp) => {
            let status = resp.status().as_u16();
            let wait = retry_after(&resp);
            let text = resp
                .body_mut()
                .with_config()
                .limit(1 << 20)
                .read_to_string()
                .unwrap_or_default();
            match status {
                200..=202 => Attempt::Done(status, text),
                408 | 429 | 500..=599 => {
                    Attempt::Retry(format!("HTTP {status}: {}", excerpt(&text)), wait)
                }
                _ => Attempt::Rejected(status, text),
            }
        }
    }
}

fn excerpt(text: &str) -> String {
    let t: String = text.trim().chars().take(300).collect();
    if t.is_empty() {
        "(empty body)".into()
    } else {
        t
    }
}

/// Runs `upload`: `Ok(None)` with the dry-run text, `Ok(Some)` once accepted.
pub fn run(
    args: &UploadArgs,
    identity: &Identity,
) -> Result<(Option<UploadOutcome>, Option<String>)> {
    check_url(&args.to)?;
    let profile = load(&args.profile, identity)?;
    let body = payload(&profile);
    if args.dry_run {
        return Ok((None, Some(render_dry_run(&args.to, &body))));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(args.timeout_s.max(1))))
        .http_status_as_error(false)
        .build()
        .into();
    let attempts = args.retries + 1;
    let mut last = String::new();
    for n in 1..=attempts {
        match attempt(&agent, &args.to, &body) {
            Attempt::Done(status, text) => {
                let response =
                    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
                return Ok((
                    Some(UploadOutcome {
                        url: args.to.clone(),
                        attempts: n,
                        status,
                        response,
                        payload_bytes: body.len(),
                    }),
                    None,
                ));
            }
            Attempt::Rejected(status, text) => {
                return Err(CollectorError::Upload(format!(
                    "the server rejected the profile (HTTP {status}): {}; {} was not changed",
                    excerpt(&text),
                    args.profile
                )))
            }
            Attempt::Retry(why, wait) => {
                last = why;
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
        assert!(check_url("https://example.org/api/profiles").is_ok());
        assert!(check_url("http://127.0.0.1:8080/x").is_ok());
        assert!(check_url("ftp://x").is_err());
        assert!(check_url("https://a b").is_err());
    }

    #[test]
    fn digest_is_stable() {
        assert_eq!(digest(b""), "cbf29ce484222325");
        assert_ne!(digest(b"a"), digest(b"b"));
    }
}
