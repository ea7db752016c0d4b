//! The collector's errors and the exit code each maps to.

use std::path::Path;

/// Exit code: bad input (a file, a field, an argument).
pub const EXIT_INPUT: i32 = 1;
/// Exit code: no NVIDIA driver or no GPU visible.
pub const EXIT_NO_GPU: i32 = 2;
/// Exit code: a GPU or measurement step failed.
pub const EXIT_GPU: i32 = 3;
/// Exit code: the upload failed (the local file is untouched).
pub const EXIT_UPLOAD: i32 = 4;
/// Exit code: the command line itself is wrong (an unknown flag, a missing
/// argument): 64, `EX_USAGE` of BSD's sysexits, apart from 2 (no driver).
pub const EXIT_USAGE: i32 = 64;
/// Exit code: the answer could not be written (a full disk, a file that
/// cannot be created): 74, `EX_IOERR` of BSD's sysexits. A closed pipe
/// (`| head`) is not an error: the command stops quietly with 0.
pub const EXIT_OUTPUT: i32 = 74;
/// Exit code: interrupted by Ctrl-C (finished work is kept).
pub const EXIT_INTERRUPTED: i32 = 130;

/// What went wrong. Every message names the file, line or field it is about.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// Bad input: a spec, a measurement file, a profile or an argument.
    #[error("{0}")]
    Input(String),
    /// No NVIDIA driver, or no GPU visible.
    #[error("{0}")]
    NoGpu(String),
    /// A CUDA call or a measurement failed.
    #[error("{0}")]
    Gpu(String),
    /// The upload did not succeed.
    #[error("{0}")]
    Upload(String),
    /// Ctrl-C: what finished is kept.
    #[error("{0}")]
    Interrupted(String),
    /// The answer could not be written (standard output or an output file).
    #[error("writing {path} failed: {reason}")]
    Write {
        /// The file, or `(standard output)`.
        path: String,
        /// What the OS said.
        reason: std::io::Error,
    },
    /// A file could not be read. (Not a `source`: the message says what
    /// the OS said once, not again as its cause.)
    #[error("{path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// What the OS said.
        reason: std::io::Error,
    },
}

impl CollectorError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CollectorError::Input(_) | CollectorError::Io { .. } => EXIT_INPUT,
            CollectorError::NoGpu(_) => EXIT_NO_GPU,
            CollectorError::Gpu(_) => EXIT_GPU,
            CollectorError::Upload(_) => EXIT_UPLOAD,
            CollectorError::Interrupted(_) => EXIT_INTERRUPTED,
            CollectorError::Write { .. } => EXIT_OUTPUT,
        }
    }

    /// A failure to write `path` (exit [`EXIT_OUTPUT`]).
    pub fn write(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        CollectorError::Write {
            path: path.as_ref().display().to_string(),
            reason: source,
        }
    }

    /// An IO error about `path`.
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        CollectorError::Io {
            path: path.as_ref().display().to_string(),
            reason: source,
        }
    }

    /// Shorthand for [`CollectorError::Input`].
    pub fn input(message: impl Into<String>) -> Self {
        CollectorError::Input(message.into())
    }
}

/// Result with [`CollectorError`].
pub type Result<T, E = CollectorError> = std::result::Result<T, E>;

/// `text` with control characters written as escapes (`\u{1b}`), except
/// newlines and tabs: what files and servers say (case names, a server's
/// error body) reaches the terminal as text, never as a command that
/// moves the cursor, recolours or retitles it.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    // Control characters, and the invisible and bidirectional ones that
    // can make a line read otherwise than it is (`profile::is_unsafe_char`).
    let is_hostile = |c: char| c != '\n' && c != '\t' && crate::profile::is_unsafe_char(c);
    if !text.chars().any(is_hostile) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_hostile(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape_controls;

    #[test]
    fn bidirectional_and_invisible_characters_are_escaped() {
        assert_eq!(
            escape_controls("a\u{202e}b\u{200b}c"),
            "a\\u{202e}b\\u{200b}c"
        );
        assert_eq!(escape_controls("naïve ≤ 5 GB"), "naïve ≤ 5 GB");
    }

    #[test]
    fn control_characters_are_escaped_and_text_kept() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(escape_controls("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(
            escape_controls("a\rb\u{7f}\u{9b}"),
            "a\\u{d}b\\u{7f}\\u{9b}"
        );
        assert_eq!(escape_controls("héllo ✓"), "héllo ✓");
    }
}
