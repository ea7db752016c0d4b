//! Text the page reads from files and pastes (a Hugging Face config.json,
//! a calibration profile): the limits it reads them under, checked before
//! any parsing, each refusal saying why.
//!
//! - size: at most [`MAX_CONFIG_BYTES`] of a config.json (1 MiB; one is a
//!   few KB, tens with a large label map) and [`MAX_PROFILE_BYTES`] of a
//!   profile (4 MiB; the bundled one is 11 KB). A file over the limit is
//!   not read at all.
//! - text: UTF-8 (a file's bytes are checked, not replaced), without the
//!   control characters JSON never holds (a NUL, an escape: a binary file).
//! - nesting: at most [`MAX_DEPTH`] levels of lists and objects (a
//!   config.json nests three or four; the JSON reader stops at 128).
//!
//! What a refusal quotes of the text or the file's name goes through
//! [`crate::format::shown`].

use crate::format;

/// Largest config.json the page reads, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Largest calibration profile the page reads, in bytes.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// Deepest nesting of lists and objects the page reads.
pub const MAX_DEPTH: usize = 64;

/// Most characters of a file's name a message quotes.
const NAME_CHARS: usize = 60;

/// `what` for a file named `name`: `config.json \`my.json\``.
pub fn file_label(what: &str, name: &str) -> String {
    format!("{what} `{}`", format::shown(name, NAME_CHARS))
}

/// Refuses `size` bytes of `what` over `max`.
pub fn check_size(what: &str, size: u64, max: u64) -> Result<(), String> {
    if size <= max {
        return Ok(());
    }
    Err(format!(
        "{what} is {} bytes: this page reads at most {} bytes ({} MiB)",
        format::int(size),
        format::int(max),
        max >> 20
    ))
}

/// A file's bytes as text, refused (with the offset) where they are not
/// UTF-8.
pub fn utf8(what: &str, bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{what} is not text: its byte {} is not UTF-8 (a binary file?)",
            format::int(e.utf8_error().valid_up_to() as u64)
        )
    })
}

/// Checks `text` before it is read as JSON: its size, that it is text, and
/// how deep it nests.
pub fn check_json_text(what: &str, text: &str, max: u64) -> Result<(), String> {
    check_size(what, text.len() as u64, max)?;
    if let Some((at, c)) = text
        .char_indices()
        .find(|&(_, c)| c < ' ' && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(format!(
            "{what} is not text: it holds the control character {} at byte {} (a binary file?)",
            format::shown(&c.to_string(), 1),
            format::int(at as u64)
        ));
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(format!(
                        "{what} nests lists and objects more than {MAX_DEPTH} levels deep: this page reads no deeper (a config.json nests a few)"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// What the config box says when its text is not a JSON object at all,
/// before any parser error: a Hugging Face Hub id (`org/name`) pasted in
/// place of the file's contents, or other text. `None` for text that
/// starts as an object does.
pub fn config_box_hint(text: &str) -> Option<String> {
    let t = text.trim();
    if t.starts_with('{') {
        return None;
    }
    const WANTS: &str =
        "this box takes the contents of a model's config.json, a JSON object (`{...}`)";
    let id_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let hub_id = t.split_once('/').is_some_and(|(org, name)| {
        !org.is_empty() && !name.is_empty() && org.chars().all(id_char) && name.chars().all(id_char)
    });
    Some(if hub_id {
        format!(
            "{} looks like a Hugging Face Hub id: {WANTS}; type the id into Search models above to select its preset or fetch its config.json, or open the model on the Hub, then its Files tab, config.json, and paste what it holds",
            format::shown(t, 80)
        )
    } else {
        format!("{WANTS}; the text starts with {}", format::shown(t, 24))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_id_in_the_config_box_is_told_what_the_box_wants() {
        let hint = config_box_hint("Qwen/Qwen2.5-7B-Instruct").unwrap();
        assert!(
            hint.contains("Hub id") && hint.contains("config.json"),
            "{hint}"
        );
        assert!(hint.contains("Qwen2.5-7B-Instruct"), "{hint}");
        let other = config_box_hint("hello").unwrap();
        assert!(
            other.contains("JSON object") && !other.contains("Hub id"),
            "{other}"
        );
        assert_eq!(config_box_hint("  {\"model_type\": \"llama\"}"), None);
        assert!(config_box_hint("org/na me")
            .unwrap()
            .contains("JSON object"));
    }

    #[test]
    fn sizes_over_the_limit_are_refused_with_both_figures() {
        assert!(check_size("config.json", MAX_CONFIG_BYTES, MAX_CONFIG_BYTES).is_ok());
        let e = check_size("config.json", 5_000_000, MAX_CONFIG_BYTES).unwrap_err();
        assert_eq!(
            e,
            "config.json is 5,000,000 bytes: this page reads at most 1,048,576 bytes (1 MiB)"
        );
        let e = check_json_text("the profile", &"x".repeat(5_000_000), MAX_PROFILE_BYTES);
        assert!(e.unwrap_err().contains("4,194,304"));
    }

    #[test]
    fn binary_text_is_refused_as_not_text() {
        let e = check_json_text("config.json", "\u{0}\u{1}PK\u{3}\u{4}", MAX_CONFIG_BYTES);
        assert_eq!(
            e.unwrap_err(),
            "config.json is not text: it holds the control character \\u{0} at byte 0 (a binary file?)"
        );
        assert!(check_json_text("c", "{\"a\":\t1,\r\n\"b\": \"ü\"}", 100).is_ok());
        let e = utf8("config.json `x.json`", vec![b'{', 0x89, b'P', 0xff]).unwrap_err();
        assert_eq!(
            e,
            "config.json `x.json` is not text: its byte 1 is not UTF-8 (a binary file?)"
        );
        assert_eq!(utf8("c", b"{}".to_vec()).unwrap(), "{}");
    }

    #[test]
    fn deep_nesting_is_refused_and_brackets_in_strings_do_not_count() {
        let e = check_json_text("config.json", &"[".repeat(10_000), MAX_CONFIG_BYTES);
        assert!(e.unwrap_err().contains("more than 64 levels deep"));
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(check_json_text("c", &ok, MAX_CONFIG_BYTES).is_ok());
        let strings = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(100), "{".repeat(100));
        assert!(check_json_text("c", &strings, MAX_CONFIG_BYTES).is_ok());
    }

    #[test]
    fn file_names_are_quoted_safely() {
        assert_eq!(
            file_label("config.json", "<img src=x>\u{202e}nosj.exe"),
            "config.json `<img src=x>\\u{202e}nosj.exe`"
        );
    }
}
