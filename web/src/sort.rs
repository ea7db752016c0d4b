//! The page's sorts, through one copy of the sort.
//!
//! Each `sort_by_key` or `sort_unstable` compiles its own copy of std's
//! sort for its element type and order: 3 to 5 KB of WebAssembly, about
//! 1.5 KB gzipped, each. The page's lists are short (GPU lines, measured
//! points, a curve's lengths, busy workers), so they are sorted here: each
//! item's key and position as a `(u64, u64, u32)`, one sort of those, then
//! the items moved into that order.

/// Sorts `items` by `key`, items with equal keys keeping their order (as
/// `sort_by_key` does).
pub fn by_key<T>(items: &mut Vec<T>, key: impl Fn(&T) -> (u64, u64)) {
    let keyed: Vec<(u64, u64, u32)> = items
        .iter()
        .zip(0u32..)
        .map(|(item, at)| {
            let (a, b) = key(item);
            (a, b, at)
        })
        .collect();
    let order = sorted(keyed);
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(order.iter().filter_map(|k| slots[k.2 as usize].take()));
}

/// The one sort: the positions make every key distinct, so an unstable
/// sort gives the stable order.
#[inline(never)]
fn sorted(mut keyed: Vec<(u64, u64, u32)>) -> Vec<(u64, u64, u32)> {
    keyed.sort_unstable();
    keyed
}

/// A key that orders `f64`s as [`f64::total_cmp`] does.
pub fn f64_key(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same order as std's stable sort, equal keys in their order.
    #[test]
    fn sorts_as_the_stable_sort_does() {
        let items: Vec<(u32, char)> = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd'), (1, 'e')];
        let mut ours = items.clone();
        by_key(&mut ours, |p| (p.0.into(), 0));
        let mut std = items.clone();
        std.sort_by_key(|p| p.0);
        assert_eq!(ours, std);
        let mut empty: Vec<u8> = Vec::new();
        by_key(&mut empty, |&b| (b.into(), 0));
        assert!(empty.is_empty());
    }

    /// `f64_key` orders as `total_cmp`: -NaN, -inf, ..., -0, +0, ..., inf, NaN.
    #[test]
    fn f64_keys_order_as_total_cmp() {
        let values = [
            f64::NAN,
            1.5,
            -0.0,
            f64::INFINITY,
            0.0,
            -2.0,
            f64::NEG_INFINITY,
            -f64::NAN,
            f64::MIN_POSITIVE,
            -1e-300,
            2.0,
        ];
        for a in values {
            for b in values {
                assert_eq!(f64_key(a).cmp(&f64_key(b)), a.total_cmp(&b), "{a} {b}");
            }
        }
    }
}
