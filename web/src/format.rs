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
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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
}
