//! Memory as exact integer bytes.

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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn displays_decimal_gigabytes_rounded() {
        assert_eq!(Bytes(17_442_865_152).to_string(), "17.44 GB");
        assert_eq!(Bytes(0).to_string(), "0.00 GB");
        assert_eq!(Bytes(4_995_000_000).to_string(), "5.00 GB");
    }
}
