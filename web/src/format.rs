//! Unit conversion and number formatting for display: the only arithmetic
//! the page does on the core's figures.

use headroom_core::Bytes;

/// Decimal gigabytes with two decimals: `17.44 GB`.
pub fn gb(value: f64) -> String {
    format!("{value:.2} GB")
}

/// Bytes as decimal gigabytes (the core's own display).
pub fn bytes(b: Bytes) -> String {
    b.to_string()
}

/// Bytes as whole MiB, as schedulers take them: `16,712 MiB`.
pub fn mib(b: Bytes) -> String {
    format!("{} MiB", int(b.0.div_ceil(1 << 20)))
}

/// An integer with thousands separators: `131,072`.
pub fn int(n: u64) -> String {
    headroom_core::bytes::group_digits(n)
}

/// A length for an axis: multiples of 1024 as `4k`, `128k`; others plain.
pub fn length(n: u64) -> String {
    if n >= 1024 && n.is_multiple_of(1024) {
        format!("{}k", n / 1024)
    } else {
        n.to_string()
    }
}

/// Parameter counts: `8.03 B`, `124.4 M`.
pub fn params(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else if n >= 1_000_000 {
        format!("{:.1} M", n as f64 / 1e6)
    } else {
        int(n)
    }
}

/// A share of a total as a percentage with one decimal.
pub fn percent(part: Bytes, total: Bytes) -> String {
    if total.0 == 0 {
        return "0.0%".into();
    }
    format!("{:.1}%", part.0 as f64 * 100.0 / total.0 as f64)
}

/// Text that came from a link, a file or a paste, made safe to show:
/// control characters and the invisible ones that reorder or hide text
/// (bidirectional overrides and isolates, zero-width characters) are
/// written as `\u{..}` escapes, and text longer than `max` characters is
/// cut there with `…`. (The page puts it in text nodes and attributes, never
/// in markup: `<script>` shows as written.)
pub fn shown(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4));
    for (count, c) in text.chars().enumerate() {
        if count == max {
            out.push('…');
            break;
        }
        let invisible = c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{061c}' | '\u{feff}');
        if invisible {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(int(0), "0");
        assert_eq!(int(131_072), "131,072");
        assert_eq!(int(1_000_000), "1,000,000");
        assert_eq!(length(131_072), "128k");
        assert_eq!(length(1000), "1000");
        assert_eq!(gb(17.444), "17.44 GB");
        assert_eq!(mib(Bytes(1)), "1 MiB");
        assert_eq!(params(8_030_261_248), "8.03 B");
        assert_eq!(params(124_439_808), "124.4 M");
        assert_eq!(percent(Bytes(1), Bytes(4)), "25.0%");
        assert_eq!(percent(Bytes(1), Bytes(0)), "0.0%");
    }

    #[test]
    fn shown_text_escapes_what_could_hide_or_reorder_it() {
        assert_eq!(shown("llama <b>8B</b>", 80), "llama <b>8B</b>");
        assert_eq!(shown("a\u{0}b\u{1b}[31m", 80), "a\\u{0}b\\u{1b}[31m");
        assert_eq!(shown("\u{202e}gpj.exe", 80), "\\u{202e}gpj.exe");
        assert_eq!(
            shown("x\u{200b}\u{2066}y\u{feff}", 80),
            "x\\u{200b}\\u{2066}y\\u{feff}"
        );
        assert_eq!(shown("line\nbreak", 80), "line\\u{a}break");
        assert_eq!(shown("ünï ✓", 80), "ünï ✓");
        assert_eq!(shown("abcdef", 3), "abc…");
        assert_eq!(shown("abc", 3), "abc");
        assert_eq!(shown(&"x".repeat(1_000_000), 10).chars().count(), 11);
    }
}
