//! What may not travel in a profile: file paths, home directories, e-mail
//! addresses, the uploader's host and user names, and characters that hide
//! or reorder text.

use super::shape::join;
use super::{field_err, ProfileError};
use alloc::format;
use alloc::string::{String, ToString};
use serde_json::Value;

/// Who runs the caller: strings a payload must not contain. The caller
/// finds them (the collector reads the host and user names); the core reads
/// nothing.
#[derive(Clone, Debug, Default)]
pub struct Identity {
    /// Host name.
    pub host: Option<String>,
    /// User name.
    pub user: Option<String>,
}

/// `s` safe to print on a terminal: control and invisible formatting
/// characters (escape sequences, bidirectional overrides) written as
/// `\u{1b}`, at most `max` characters.
pub fn printable(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push_str("...");
            break;
        }
        if is_unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters (C0, DEL, C1) and the invisible ones that reorder or
/// hide text (bidirectional controls, zero-width characters, BOM).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}'
            | '\u{feff}'
            | '\u{061c}')
}

/// What makes a string identifying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identifying {
    /// An absolute or relative file path, or a file name.
    Path,
    /// A home directory (`~`, `~alice`, `$HOME`, `%USERPROFILE%`).
    Home,
    /// An e-mail address or `user@host`.
    Email,
}

impl Identifying {
    fn problem(self) -> &'static str {
        match self {
            Identifying::Path => "looks like a file path",
            Identifying::Home => "names a home directory",
            Identifying::Email => "looks like an e-mail address or user@host",
        }
    }
}

/// File name endings that mark a word as a file name.
const FILE_EXTENSIONS: [&str; 30] = [
    "py",
    "sh",
    "bash",
    "zsh",
    "ipynb",
    "csv",
    "tsv",
    "json",
    "jsonl",
    "txt",
    "log",
    "out",
    "err",
    "yaml",
    "yml",
    "toml",
    "ini",
    "cfg",
    "conf",
    "pt",
    "pth",
    "bin",
    "ckpt",
    "safetensors",
    "gguf",
    "npy",
    "npz",
    "pkl",
    "parquet",
    "h5",
];

/// Characters of a path component (`data`, `x.csv`, `..`, `~alice`).
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._-~+%:@".contains(c)
}

/// One word of a text: is it a path, a home directory or an address?
fn identifying_word(word: &str) -> Option<Identifying> {
    let w = word.trim_end_matches(['.', ',', ':', '!', '?']);
    if w.is_empty() {
        return None;
    }
    let lower = w.to_ascii_lowercase();
    if let Some(rest) = w.strip_prefix('~') {
        if rest
            .chars()
            .next()
            .is_none_or(|c| c == '/' || c == '\\' || c.is_alphabetic() || c == '_')
        {
            return Some(Identifying::Home);
        }
    }
    if [
        "$home",
        "${home}",
        "%userprofile%",
        "%homepath%",
        "%homedrive%",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        return Some(Identifying::Home);
    }
    if let Some((user, host)) = w.split_once('@') {
        let near = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "_.-+".contains(c));
        if near(user.chars().next_back()) && near(host.chars().next()) {
            return Some(Identifying::Email);
        }
    }
    if w.contains(['/', '\\']) {
        let named = w.split(['/', '\\']).any(|part| {
            (part == "." || part == ".." || part.chars().any(|c| c.is_alphabetic()))
                && part.chars().all(is_path_char)
        });
        if named {
            return Some(Identifying::Path);
        }
    }
    if let Some((stem, ext)) = lower.rsplit_once('.') {
        if !stem.is_empty() && FILE_EXTENSIONS.contains(&ext) {
            return Some(Identifying::Path);
        }
    }
    None
}

/// Whether `s` holds a file path (absolute or relative, Unix or Windows, or
/// a file name such as `run.sh`), a home directory, an e-mail address or a
/// `user@host`.
pub fn identifying(s: &str) -> Option<Identifying> {
    let t = s.trim();
    let bytes = t.as_bytes();
    if t.starts_with('/')
        || t.starts_with("./")
        || t.starts_with("../")
        || t.starts_with("\\\\")
        || (bytes.len() > 2
            && bytes[0].is_ascii_alphabetic()
            && bytes[1] == b':'
            && (bytes[2] == b'\\' || bytes[2] == b'/'))
        || [
            "/home/",
            "/Users/",
            "/root/",
            "/tmp/",
            "/mnt/",
            "/work/",
            "\\Users\\",
            ".py",
            ".jsonl",
            ".sh",
        ]
        .iter()
        .any(|m| t.contains(m))
    {
        return Some(Identifying::Path);
    }
    t.split(|c: char| c.is_whitespace() || "\"'`,;()[]{}<>|=".contains(c))
        .find_map(identifying_word)
}

/// True when `s` looks like a file-system path (or a home directory).
pub fn looks_like_path(s: &str) -> bool {
    matches!(identifying(s), Some(Identifying::Path | Identifying::Home))
}

fn contains_word(hay: &str, needle: &str) -> bool {
    let hay = hay.to_lowercase();
    let needle = needle.to_lowercase();
    let mut from = 0;
    while let Some(pos) = hay[from..].find(&needle) {
        let start = from + pos;
        let end = start + needle.len();
        let before = hay[..start].chars().next_back();
        let after = hay[end..].chars().next();
        let boundary = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric());
        if boundary(before) && boundary(after) {
            return true;
        }
        from = start + needle.len().max(1);
    }
    false
}

/// Names too common to be identifying.
const GENERIC_NAMES: [&str; 6] = ["root", "user", "admin", "localhost", "ubuntu", "debian"];

/// Why `s` may not travel: a path, a home directory, an address, or this
/// machine's host or user name; `(problem, allowed)`.
fn refusal(s: &str, id: &Identity) -> Option<(String, &'static str)> {
    if let Some(kind) = identifying(s) {
        let allowed = match kind {
            Identifying::Path => "no file paths in a profile (it is uploaded as is)",
            Identifying::Home => "no home directories in a profile (it is uploaded as is)",
            Identifying::Email => {
                "no e-mail addresses or user@host names in a profile (it is uploaded as is)"
            }
        };
        return Some((kind.problem().to_string(), allowed));
    }
    for (what, name) in [("host name", &id.host), ("user name", &id.user)] {
        if let Some(name) = name {
            if name.len() >= 3
                && !GENERIC_NAMES.contains(&name.to_lowercase().as_str())
                && contains_word(s, name)
            {
                return Some((
                    format!("contains this machine's {what}"),
                    "no host or user names in a profile",
                ));
            }
        }
    }
    None
}

/// Rejects any key or string that looks like a path, a home directory, an
/// e-mail address or `user@host`, or holds the host or user name.
pub fn scan_strings(v: &Value, at: &str, id: &Identity) -> Result<(), ProfileError> {
    match v {
        Value::String(s) => {
            let field = if at.is_empty() { "(document)" } else { at };
            match refusal(s, id) {
                Some((problem, allowed)) => Err(field_err(field, problem, allowed)),
                None => Ok(()),
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                scan_strings(item, &format!("{at}[{i}]"), id)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let path = join(at, k);
                if let Some((problem, allowed)) = refusal(k, id) {
                    return Err(field_err(
                        &printable(&path, 200),
                        format!("the key {problem}"),
                        allowed,
                    ));
                }
                scan_strings(item, &path, id)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_names_are_spotted() {
        assert!(looks_like_path("/home/alice/job.py"));
        assert!(looks_like_path("C:\\Users\\bob"));
        assert!(looks_like_path("python my_job.py --len 5"));
        assert!(!looks_like_path("NVIDIA H200"));
        assert!(!looks_like_path("2.11.0+cu130"));
        assert!(contains_word("run on gpu-box-7 today", "gpu-box-7"));
        assert!(!contains_word("alicia", "alice"));
        assert!(contains_word("Alice's run", "alice"));
    }
}
