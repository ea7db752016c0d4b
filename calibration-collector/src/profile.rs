//! The calibration profile: what `fit` writes, `upload` sends, `check
//! --profile` applies and the page bundles from `calibration/profiles/`.
//!
//! The schema and its checks are the core's (`headroom_core::calibration`),
//! which the registry runs too; this module adds what needs IO: reading a
//! profile file within [`MAX_PROFILE_BYTES`] and this machine's host and
//! user names ([`local_identity`]), which a profile must not hold.

use crate::error::CollectorError;
pub use headroom_core::calibration::*;

/// This machine's host name and this user's name.
pub fn local_identity() -> Identity {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .or_else(|| {
            std::env::var("HOME")
                .ok()
                .and_then(|h| h.rsplit('/').next().map(str::to_string))
        })
        .filter(|s| !s.is_empty());
    Identity { host, user }
}

/// Reads a profile file's text (`-`: standard input), refusing more than
/// [`MAX_PROFILE_BYTES`]: a regular file by its size, before reading; a pipe,
/// a device or standard input by reading at most one byte over the limit, so
/// neither a huge file nor `/dev/urandom` is read into memory.
pub fn read_text(path: &str) -> Result<String, CollectorError> {
    crate::cases::read_limited(path, MAX_PROFILE_BYTES as u64, "a profile")
}
