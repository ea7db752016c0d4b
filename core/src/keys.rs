//! The workload vocabulary: one key per enum variant.
//!
//! Every workload enum ([`crate::arch::Dtype`], and in [`crate::workload`]
//! `Mode`, `Attention`, `InferenceKind`, `Logits`, `Optimizer`, `OptimizerImpl`, `Precision`,
//! `LoadPath`) has one string per variant, used by spec files, measurement
//! files, URLs, the page's selects and the command line alike:
//!
//! - `key()` gives the variant's key;
//! - `from_key(&str)` reads a key (or one of the few documented aliases);
//! - `ALL` lists the variants and `KEYS` their keys, in the same order, for
//!   selects and error messages; [`one_of`] writes `KEYS` as prose.
//!
//! The serde form of these enums is the key, read and written through the
//! same two functions.

use alloc::string::String;

/// `"a", "b" or "c"`: a list of keys as an error message's allowed values.
pub fn one_of(keys: &[&str]) -> String {
    let mut out = String::new();
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            out.push_str(if i + 1 == keys.len() { " or " } else { ", " });
        }
        out.push('"');
        out.push_str(key);
        out.push('"');
    }
    out
}

/// Gives an enum of unit variants its keys: `key`, `from_key`, `ALL`,
/// `KEYS`, and with the `serde` feature a serde form that is the key.
///
/// ```ignore
/// keyed! { Attention { Sdpa => "sdpa", Eager => "eager" } }
/// ```
///
/// A variant may list aliases after its key (`Sgd => "sgd" | "old_name"`):
/// `from_key` accepts them, `key` and serialisation give the first.
macro_rules! keyed {
    ($ty:ident { $($variant:ident => $key:literal $(| $alias:literal)*),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in the order of [`Self::KEYS`].
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];
            /// The key of each variant of [`Self::ALL`], in the same order.
            pub const KEYS: &'static [&'static str] = &[$($key),+];

            /// The key used in specs, measurement files, URLs and selects.
            pub const fn key(self) -> &'static str {
                match self {
                    $($ty::$variant => $key),+
                }
            }

            /// The variant of a key (or of a documented alias), if any.
            pub fn from_key(key: &str) -> Option<$ty> {
                match key {
                    $($key $(| $alias)* => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        #[cfg(feature = "serde")]
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.key())
            }
        }

        #[cfg(feature = "serde")]
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                struct KeyVisitor;
                impl serde::de::Visitor<'_> for KeyVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                        f.write_str("one of ")?;
                        f.write_str(&$crate::keys::one_of($ty::KEYS))
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$ty, E> {
                        $ty::from_key(v).ok_or_else(|| E::unknown_variant(v, $ty::KEYS))
                    }
                }
                d.deserialize_str(KeyVisitor)
            }
        }
    };
}

pub(crate) use keyed;

#[cfg(test)]
mod tests {
    use super::one_of;
    use crate::arch::Dtype;
    use crate::workload::{
        Attention, InferenceKind, LoadPath, Logits, Mode, Optimizer, OptimizerImpl, Precision,
    };

    macro_rules! round_trips {
        ($($ty:ty),+) => {$(
            assert_eq!(<$ty>::ALL.len(), <$ty>::KEYS.len());
            for (variant, key) in <$ty>::ALL.iter().zip(<$ty>::KEYS) {
                assert_eq!(variant.key(), *key);
                assert_eq!(<$ty>::from_key(key), Some(*variant), "{key}");
                #[cfg(feature = "serde")]
                {
                    let json = serde_json::to_value(variant).unwrap();
                    assert_eq!(json, serde_json::Value::from(*key));
                    let back: $ty = serde_json::from_value(json).unwrap();
                    assert_eq!(back, *variant);
                }
            }
            assert_eq!(<$ty>::from_key("no such key"), None);
        )+};
    }

    #[test]
    fn every_key_round_trips() {
        round_trips!(
            Dtype,
            Mode,
            Attention,
            InferenceKind,
            Logits,
            Optimizer,
            OptimizerImpl,
            Precision,
            LoadPath
        );
    }

    #[test]
    fn sgd_is_sgd_with_momentum_as_measurement_files_say() {
        assert_eq!(Optimizer::from_key("sgd"), Some(Optimizer::SgdMomentum));
        assert_eq!(
            Optimizer::from_key("sgd_momentum"),
            Some(Optimizer::SgdMomentum)
        );
        assert_eq!(Optimizer::from_key("sgd_plain"), Some(Optimizer::Sgd));
        assert_eq!(Optimizer::SgdMomentum.key(), "sgd");
    }

    #[test]
    fn one_of_reads_as_prose() {
        assert_eq!(one_of(&["a"]), "\"a\"");
        assert_eq!(one_of(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
