//! Memory as exact integer bytes.

use alloc::string::{String, ToString};
use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A number of bytes. Every memory figure in headroom is exact and integer;
/// floats appear only in fitted coefficients and in display.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct Bytes(pub u64);

/// One mebibyte (2^20 bytes).
pub const MIB: u64 = 1 << 20;
/// One gibibyte (2^30 bytes).
pub const GIB: u64 = 1 << 30;
/// One gigabyte (10^9 bytes), the unit nvidia-smi users and GPU vendors quote.
pub const GB: u64 = 1_000_000_000;

impl Bytes {
    /// Zero bytes.
    pub const ZERO: Bytes = Bytes(0);

    /// The value in decimal gigabytes (10^9), for display and charts.
    pub fn as_gb(self) -> f64 {
        self.0 as f64 / GB as f64
    }

    /// Saturating subtraction.
    pub fn saturating_sub(self, other: Bytes) -> Bytes {
        Bytes(self.0.saturating_sub(other.0))
    }
}

impl Add for Bytes {
    type Output = Bytes;
    fn add(self, rhs: Bytes) -> Bytes {
        Bytes(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Bytes {
    fn add_assign(&mut self, rhs: Bytes) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sub for Bytes {
    type Output = Bytes;
    fn sub(self, rhs: Bytes) -> Bytes {
        Bytes(self.0.saturating_sub(rhs.0))
    }
}

impl fmt::Display for Bytes {
    /// Decimal gigabytes with two decimals, e.g. `17.44 GB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hundredths = (self.0 + GB / 200) / (GB / 100);
        write!(f, "{}.{:02} GB", hundredths / 100, hundredths % 100)
    }
}

/// An integer with thousands separators, as the CLI and the page print
/// byte counts and lengths: `1234567` -> `1,234,567`.
pub fn group_digits(n: u64) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_digits_by_thousands() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1_000), "1,000");
        assert_eq!(group_digits(1_234_567), "1,234,567");
        assert_eq!(group_digits(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn displays_decimal_gigabytes_rounded() {
        assert_eq!(Bytes(17_442_865_152).to_string(), "17.44 GB");
        assert_eq!(Bytes(0).to_string(), "0.00 GB");
        assert_eq!(Bytes(4_995_000_000).to_string(), "5.00 GB");
    }
}
