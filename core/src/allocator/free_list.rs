//! The free blocks of one pool, for best-fit search in constant time.
//!
//! PyTorch keeps each pool's free blocks in a `std::set` ordered by (size,
//! address) and takes the first block at least as large as the request.
//! This list answers the same question with segregated bins (as TLSF
//! allocators do): block sizes, in 512 B units, fall into 16 bins per power
//! of two, every block of a bin is smaller than every block of the next, and
//! a bitmap marks the bins that hold a block. The best fit is the smallest
//! (size, address) at least as large as the request in the request's own
//! bin, or else the smallest (size, address) of the next non-empty bin.
//! Bins are short (a replay holds a few hundred free blocks spread over many
//! sizes), so that is a scan of a few entries, where a balanced tree costs a
//! dozen cache misses per insert, removal and search.

use alloc::vec;
use alloc::vec::Vec;

/// Sub-bins per power of two (as a shift).
const SUB_BIN_BITS: u32 = 4;
const SUB_BINS: usize = 1 << SUB_BIN_BITS;
/// Sizes are multiples of 512 B; bins count 512 B units.
const UNIT_SHIFT: u32 = 9;
/// Bins for every size up to 2^64 B: sizes below `SUB_BINS` units get one
/// bin each, then `SUB_BINS` bins per power of two.
const BINS: usize = SUB_BINS + (64 - UNIT_SHIFT as usize - SUB_BIN_BITS as usize) * SUB_BINS;
const WORDS: usize = BINS.div_ceil(64);

/// Bin of a block size (monotone: a larger size never gets a lower bin).
fn bin_of(size: u64) -> usize {
    let units = size >> UNIT_SHIFT;
    if units < SUB_BINS as u64 {
        return units as usize;
    }
    let exponent = 63 - units.leading_zeros();
    let mantissa = (units >> (exponent - SUB_BIN_BITS)) as usize & (SUB_BINS - 1);
    SUB_BINS + (exponent - SUB_BIN_BITS) as usize * SUB_BINS + mantissa
}

/// `Vec::remove`, without the (out-of-line) zero-length copy when the
/// entry is the last, as the best fit of a bin usually is.
fn remove_at(entries: &mut Vec<Entry>, index: usize) -> Entry {
    if index + 1 == entries.len() {
        entries.pop().expect("index in bounds")
    } else {
        entries.remove(index)
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// (size, address) as one integer: compares in two instructions.
    key: u128,
    block: u32,
}

fn key(size: u64, address: u64) -> u128 {
    (u128::from(size) << 64) | u128::from(address)
}

impl Entry {
    fn size(&self) -> u64 {
        (self.key >> 64) as u64
    }
}

/// A best-fit result, to take out of the list without searching again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Found {
    /// Size of the free block.
    pub(super) size: u64,
    /// Its id.
    pub(super) block: u32,
    bin: usize,
    index: usize,
}

/// Free blocks of one pool, searchable best-fit (smallest size, then lowest
/// address).
#[derive(Clone, Debug)]
pub(super) struct FreeList {
    /// Each bin sorted by (size, address), largest first: the best fit of
    /// a bin is at its end, where removing it moves nothing (a bin mostly
    /// holds blocks of one size, and new segments have the lowest addresses).
    bins: Vec<Vec<Entry>>,
    occupied: [u64; WORDS],
}

impl FreeList {
    pub(super) fn new() -> FreeList {
        FreeList {
            bins: vec![Vec::new(); BINS],
            occupied: [0; WORDS],
        }
    }

    /// Removes every block, keeping the bins' memory.
    pub(super) fn clear(&mut self) {
        for (word, bits) in self.occupied.iter_mut().enumerate() {
            while *bits != 0 {
                let bin = word * 64 + bits.trailing_zeros() as usize;
                self.bins[bin].clear();
                *bits &= *bits - 1;
            }
        }
    }

    /// Free blocks in the list.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.bins.iter().map(Vec::len).sum()
    }

    pub(super) fn insert(&mut self, block: u32, size: u64, address: u64) {
        let bin = bin_of(size);
        let entry = Entry {
            key: key(size, address),
            block,
        };
        let entries = &mut self.bins[bin];
        // Most blocks freed into a crowded bin are the lowest of their size
        // (new segments lie below the old ones): they go at the end.
        if entries.last().is_none_or(|last| last.key > entry.key) {
            entries.push(entry);
        } else {
            let at = entries.partition_point(|e| e.key > entry.key);
            entries.insert(at, entry);
        }
        self.occupied[bin / 64] |= 1 << (bin % 64);
    }

    /// Removes a block inserted with `size` and `address`.
    pub(super) fn remove(&mut self, block: u32, size: u64, address: u64) {
        let bin = bin_of(size);
        let entries = &mut self.bins[bin];
        let at = entries.partition_point(|e| e.key > key(size, address));
        debug_assert_eq!(entries[at].block, block, "block not in its bin");
        remove_at(entries, at);
        if entries.is_empty() {
            self.occupied[bin / 64] &= !(1 << (bin % 64));
        }
    }

    /// The free block `std::set::lower_bound((size, 0))` finds: the smallest
    /// size at least `size`, lowest address on ties.
    pub(super) fn best_fit(&self, size: u64) -> Option<Found> {
        let first = bin_of(size);
        let own = &self.bins[first];
        // The smallest block of the bin (its last) usually fits already.
        let fitting = match own.last() {
            Some(last) if last.key >= key(size, 0) => own.len(),
            _ => own.partition_point(|e| e.key >= key(size, 0)),
        };
        let (bin, index) = if fitting > 0 {
            (first, fitting - 1)
        } else {
            let bin = self.next_occupied(first + 1)?;
            (bin, self.bins[bin].len().checked_sub(1)?)
        };
        let e = self.bins[bin][index];
        Some(Found {
            size: e.size(),
            block: e.block,
            bin,
            index,
        })
    }

    /// Removes the block `best_fit` found (nothing changed since); returns its id.
    pub(super) fn take(&mut self, found: Found) -> u32 {
        let entries = &mut self.bins[found.bin];
        let e = remove_at(entries, found.index);
        debug_assert_eq!(e.block, found.block, "the list changed since best_fit");
        if entries.is_empty() {
            self.occupied[found.bin / 64] &= !(1 << (found.bin % 64));
        }
        e.block
    }

    /// First non-empty bin at or after `from`.
    fn next_occupied(&self, from: usize) -> Option<usize> {
        if from >= BINS {
            return None;
        }
        let mut word = from / 64;
        let mut bits = self.occupied[word] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.occupied[word];
        }
    }

    /// Every free block, in (size, address) order: (size, address, id).
    pub(super) fn sorted(&self) -> Vec<(u64, u64, u32)> {
        let mut all: Vec<(u64, u64, u32)> = self
            .bins
            .iter()
            .flatten()
            .map(|e| (e.size(), e.key as u64, e.block))
            .collect();
        all.sort_unstable();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn bins_are_monotone_in_size_and_in_range() {
        let mut last = 0;
        let mut size = 512u64;
        while size < u64::MAX / 3 {
            for s in [size, size + 512, size * 3 / 2] {
                assert!(bin_of(s) < BINS, "size {s}");
            }
            let b = bin_of(size);
            assert!(b >= last, "size {size}: bin {b} < {last}");
            last = b;
            size += size / 7 + 512;
        }
        assert!(bin_of(!511) < BINS);
    }

    proptest! {
        /// The bins answer exactly as the ordered set PyTorch uses.
        #[test]
        fn best_fit_matches_an_ordered_set(
            ops in proptest::collection::vec((0u8..3, 1u64..5_000, 0u64..64), 1..400)
        ) {
            let mut list = FreeList::new();
            let mut set: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
            let mut next_block = 0u32;
            for (kind, units, pick) in ops {
                // Sizes cluster on a few values (ties) and spread over bins.
                let size = if units % 3 == 0 { (units % 7 + 1) * 512 } else { units * units * 512 };
                match kind {
                    0 => {
                        let address = (u64::from(next_block) * 7919 % 1000) << 40;
                        list.insert(next_block, size, address);
                        set.insert((size, address, next_block));
                        next_block += 1;
                    }
                    1 if !set.is_empty() => {
                        let &(s, a, b) = set.iter().nth(pick as usize % set.len()).unwrap();
                        set.remove(&(s, a, b));
                        list.remove(b, s, a);
                    }
                    _ => {
                        let expected = set.range((size, 0, 0)..).next().copied();
                        let found = list.best_fit(size);
                        prop_assert_eq!(found.map(|f| (f.size, f.block)), expected.map(|(s, _, b)| (s, b)));
                        // Half the time, take what was found.
                        if let (Some(found), Some(e)) = (found, expected) {
                            if pick % 2 == 0 {
                                prop_assert_eq!(list.take(found), e.2);
                                set.remove(&e);
                            }
                        }
                    }
                }
                prop_assert_eq!(list.len(), set.len());
            }
            prop_assert_eq!(list.sorted(), set.into_iter().collect::<Vec<_>>());
        }
    }
}
