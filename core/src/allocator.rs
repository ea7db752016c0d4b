//! A model of PyTorch's CUDA caching allocator (`c10/cuda/CUDACachingAllocator.cpp`).
//!
//! Rules modelled (one device, one stream):
//! - every request is rounded up to a multiple of [`MIN_BLOCK_SIZE`] (512 B);
//! - requests up to [`SMALL_SIZE`] (1 MiB) come from the small pool, carved
//!   out of [`SMALL_BUFFER`] (2 MiB) segments; requests up to
//!   [`MIN_LARGE_ALLOC`] (10 MiB) get a [`LARGE_BUFFER`] (20 MiB) segment;
//!   larger requests get a segment of the request rounded up to
//!   [`ROUND_LARGE`] (2 MiB);
//! - a free cached block is reused best-fit (smallest block that is large
//!   enough, lowest address on ties); with `max_split_size` set, oversize
//!   blocks are refused as in `get_free_block`;
//! - a block is split when the remainder is >= 512 B (small pool) or
//!   > 1 MiB (large pool); an unsplit remainder counts as allocated;
//! - freed blocks merge with free neighbours in their segment and stay
//!   reserved until `empty_cache()`, or until a `cudaMalloc` fails: then
//!   every fully free segment is released and the call retried;
//! - `expandable_segments:True`: one segment per pool that grows by 2 MiB
//!   (small) or 20 MiB (large) pages at its end;
//! - segments get the virtual addresses the CUDA driver gives them
//!   ([`VA_GRANULE`]), which decide best fit's ties.

mod free_list;

use alloc::vec::Vec;
use free_list::{Found, FreeList};

/// Requests are rounded up to a multiple of this (`kMinBlockSize`).
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served by the small pool (`kSmallSize`).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (`kSmallBuffer`).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Segment size for requests between 1 and 10 MiB (`kLargeBuffer`).
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Requests at least this large get their own segment (`kMinLargeAlloc`).
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Large segments are rounded up to a multiple of this (`kRoundLarge`).
pub const ROUND_LARGE: u64 = 2 << 20;

/// The CUDA driver's virtual addresses, as the H200 allocation traces show
/// them (`measurements/h200-segments`, `measurements/h200-generalization/
/// trace-segments*.jsonl`): a new segment takes the lowest free address
/// range it fits in; when none fits, the driver maps a new range of the
/// segment's size rounded up to this granule below every earlier one, and
/// the rest of that range stays free for later segments (a 50 MiB segment
/// leaves 14 MiB above it, where the next 14 MiB or 2 MiB segment goes; a
/// 98 MiB one leaves 30 MiB for a 26 MiB one). Only the order of addresses
/// matters to the caching allocator: best fit breaks ties between equal
/// free blocks by the lowest address.
///
/// Ranges released by `empty_cache()` are not given back: the segments a
/// process creates after emptying its cache lie below one another in the
/// order they were created, as in a fresh process. Traced in jobs that ran
/// after others in one process (`measurements/history-traces/`): of 551
/// pairs of equal-size segments created after the cache was emptied, the
/// later one lies lower in 544 (the driver reuses the released ranges, from
/// the top down). Handing them back lowest first, as before, reversed that
/// order and with it best fit's ties: four such jobs reserved 128 MiB to
/// 1.3 GB less in the replay than on the H200 (-2.2% to -2.9%), now within
/// 0.2%.
pub const VA_GRANULE: u64 = 32 << 20;
/// What a replay without a capacity may reserve: 2^61 bytes. No job's
/// tensors reach 2^60 (the families' `MAX_JOB_BYTES`), but a cache
/// that is never released can grow without end (a million decode steps,
/// each a little larger); past this bound the replay releases its cache
/// as a real card does when it runs out, and the addresses below
/// `TOP_ADDRESS` never run out.
pub const UNBOUNDED_CAPACITY: u64 = 1 << 61;
/// The model's address space starts just below this address.
const TOP_ADDRESS: u64 = 1 << 62;
/// Expandable segments (one per pool, growing in place) live above the
/// mapped ranges, this far apart.
const EXPANDABLE_BASE: u64 = 1 << 62;
const EXPANDABLE_SPACING: u64 = 1 << 56;

/// Allocator settings (`PYTORCH_CUDA_ALLOC_CONF`), an input of the run.
pub use crate::runtime::AllocatorConfig;

/// Rounds a request the way `round_size` does (no power-of-two divisions).
pub fn round_size(request: u64) -> u64 {
    if request < MIN_BLOCK_SIZE {
        MIN_BLOCK_SIZE
    } else {
        request.div_ceil(MIN_BLOCK_SIZE) * MIN_BLOCK_SIZE
    }
}

/// The segment size `cudaMalloc` is asked for when no cached block fits
/// (`get_allocation_size`).
pub fn segment_size(rounded: u64) -> u64 {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

/// Handle to a live allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockId(u32);

impl BlockId {
    /// Index of the block (stable while it is live).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Block 0 is a sentinel, never freed: the missing neighbour of a
/// segment's first and last block. It counts as allocated, so a free block
/// never merges with it, and links to it are written without a test.
const NONE: u32 = 0;
const SENTINEL: Block = Block {
    address: 0,
    size: 0,
    allocated: true,
    small: false,
    stream: Stream(0),
    prev: NONE,
    next: NONE,
    segment: NO_SEGMENT,
};
/// No segment (a pool without an expandable segment yet).
const NO_SEGMENT: u32 = u32::MAX;

/// Most CUDA streams a replay allocates on: the compute stream and up to
/// three side streams (FSDP2's all-gather copy-in, all-gather and
/// reduce-scatter streams).
pub const MAX_STREAMS: usize = 4;

/// A CUDA stream as the caching allocator sees it. c10 keys free blocks by
/// stream first: a block freed by a tensor of one stream serves only later
/// requests on that stream, and a segment created for one stream is split
/// only for that stream. Each stream thus has a small and a large pool of
/// its own; reserved bytes, the driver's addresses and the cache flush on a
/// failed `cudaMalloc` are shared by all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stream(u8);

impl Stream {
    /// The compute stream (`torch.cuda.current_stream()`).
    pub const DEFAULT: Stream = Stream(0);

    /// Side stream number `n` (1 to `MAX_STREAMS - 1`).
    pub const fn side(n: u8) -> Stream {
        assert!(
            n >= 1 && (n as usize) < MAX_STREAMS,
            "side stream out of range"
        );
        Stream(n)
    }

    /// Index of the stream's pool for blocks of this kind: small pools at
    /// even indices, large at odd ones; the compute stream's are 0 and 1.
    fn pool(self, small: bool) -> usize {
        self.0 as usize * 2 + usize::from(!small)
    }
}

const POOLS: usize = 2 * MAX_STREAMS;

#[derive(Clone, Copy, Debug)]
struct Block {
    address: u64,
    size: u64,
    allocated: bool,
    small: bool,
    stream: Stream,
    prev: u32,
    next: u32,
    segment: u32,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    size: u64,
    live: bool,
    head: u32,
}

/// Running totals, as `torch.cuda.memory_stats` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes in allocated blocks (`allocated_bytes.all.current`).
    pub allocated: u64,
    /// Bytes in segments obtained from `cudaMalloc` (`reserved_bytes.all.current`).
    pub reserved: u64,
    /// Highest `allocated` so far.
    pub peak_allocated: u64,
    /// Highest `reserved` so far.
    pub peak_reserved: u64,
    /// `cudaMalloc` calls that created a segment.
    pub segments_created: u64,
    /// Times the allocator freed its cache to retry a failed `cudaMalloc`.
    pub cache_flushes: u64,
}

/// The allocation could not be served even after freeing the cache: the
/// job runs out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The rounded request that failed.
    pub request: u64,
}

/// The caching allocator of one device and one stream.
#[derive(Clone, Debug)]
pub struct CachingAllocator {
    config: AllocatorConfig,
    /// Bytes `cudaMalloc` may hand out in total (reserved limit); `None` is unbounded.
    capacity: Option<u64>,
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    segments: Vec<Segment>,
    /// Free blocks of each stream's small and large pool (see
    /// [`Stream::pool`]), best-fit by (size, address).
    free_lists: [FreeList; POOLS],
    /// Free virtual-address ranges (start, length), highest first.
    va_free: Vec<(u64, u64)>,
    /// At least the length of the longest free range.
    va_largest: u64,
    /// Lowest address mapped so far.
    va_bottom: u64,
    /// Expandable mode: the growing segment of each pool.
    expandable: [u32; POOLS],
    stats: Stats,
}

impl CachingAllocator {
    /// An empty allocator. `capacity` bounds reserved bytes (the memory the
    /// process may still obtain from the driver); `None` means unbounded.
    pub fn new(config: AllocatorConfig, capacity: Option<u64>) -> Self {
        CachingAllocator {
            config,
            capacity,
            blocks: {
                let mut blocks = Vec::with_capacity(1024);
                blocks.push(SENTINEL);
                blocks
            },
            free_slots: Vec::new(),
            segments: Vec::with_capacity(512),
            free_lists: core::array::from_fn(|_| FreeList::new()),
            va_free: Vec::new(),
            va_largest: 0,
            va_bottom: TOP_ADDRESS,
            expandable: [NO_SEGMENT; POOLS],
            stats: Stats::default(),
        }
    }

    /// Empties the allocator as [`CachingAllocator::new`] would, keeping the
    /// memory of its arrays.
    pub fn reset(&mut self, config: AllocatorConfig, capacity: Option<u64>) {
        self.config = config;
        self.capacity = capacity;
        self.blocks.clear();
        self.blocks.push(SENTINEL);
        self.free_slots.clear();
        self.segments.clear();
        for list in &mut self.free_lists {
            list.clear();
        }
        self.va_free.clear();
        self.va_largest = 0;
        self.va_bottom = TOP_ADDRESS;
        self.expandable = [NO_SEGMENT; POOLS];
        self.stats = Stats::default();
    }

    /// Changes the reserved-bytes limit.
    pub fn set_capacity(&mut self, capacity: Option<u64>) {
        self.capacity = capacity;
    }

    /// Current and peak totals.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// What the next allocations and frees depend on, as numbers: every
    /// block of every segment (address, size, allocated, pool), the free
    /// address ranges, each pool's expandable segment and the current
    /// totals. Two equal signatures behave alike under the same requests
    /// (block ids aside, which decide nothing). The peaks are left out.
    pub fn state_signature(&self) -> Vec<u64> {
        // Both lists as `(u64, u64, u32)`, the free lists' element type, so
        // that one copy of the sort serves all three (a smaller page).
        let mut blocks: Vec<(u64, u64, u32)> = Vec::with_capacity(self.blocks.len());
        for segment in self.segments.iter().filter(|s| s.live) {
            let mut b = segment.head;
            while b != NONE {
                let block = &self.blocks[b as usize];
                let flags = u32::from(block.allocated)
                    | (u32::from(block.small) << 1)
                    | (u32::from(block.stream.0) << 2);
                blocks.push((block.address, block.size, flags));
                b = block.next;
            }
        }
        blocks.sort_unstable();
        let mut va_free: Vec<(u64, u64, u32)> = self
            .va_free
            .iter()
            .map(|&(start, len)| (start, len, 0))
            .collect();
        va_free.sort_unstable();
        let mut out: Vec<u64> = blocks
            .into_iter()
            .flat_map(|(address, size, flags)| [address, size, u64::from(flags)])
            .collect();
        out.extend(va_free.into_iter().flat_map(|(start, len, _)| [start, len]));
        out.push(self.va_bottom);
        for seg in self.expandable {
            out.push(match seg {
                NO_SEGMENT => u64::MAX,
                s => self.blocks[self.segments[s as usize].head as usize].address,
            });
        }
        out.extend([self.stats.allocated, self.stats.reserved]);
        out
    }

    /// Starts a new peak window (`reset_peak_memory_stats`).
    pub fn reset_peaks(&mut self) {
        self.stats.peak_allocated = self.stats.allocated;
        self.stats.peak_reserved = self.stats.reserved;
    }

    /// Address of a live block in the model's virtual address space.
    pub fn block_address(&self, id: BlockId) -> u64 {
        self.blocks[id.0 as usize].address
    }

    /// Where a live block is, for comparing with an allocation trace: its
    /// segment's creation index plus one in the bits above 2^44, its offset
    /// in the segment below.
    pub fn block_location(&self, id: BlockId) -> u64 {
        let blk = self.blocks[id.0 as usize];
        let base = self.blocks[self.segments[blk.segment as usize].head as usize].address;
        ((u64::from(blk.segment) + 1) << 44) | (blk.address - base)
    }

    /// Size of the most recently created segment.
    pub fn last_segment_size(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.size)
    }

    /// Live segments in creation order: (size, free bytes inside it).
    pub fn segments(&self) -> alloc::vec::Vec<(u64, u64)> {
        let mut out = alloc::vec::Vec::new();
        for seg in self.segments.iter().filter(|s| s.live) {
            let mut free = 0;
            let mut b = seg.head;
            while b != NONE {
                let blk = &self.blocks[b as usize];
                if !blk.allocated {
                    free += blk.size;
                }
                b = blk.next;
            }
            out.push((seg.size, free));
        }
        out
    }

    /// Every allocated block: (handle, size).
    pub fn live_blocks(&self) -> impl Iterator<Item = (BlockId, u64)> + '_ {
        let free: alloc::collections::BTreeSet<u32> = self.free_slots.iter().copied().collect();
        self.blocks
            .iter()
            .enumerate()
            .skip(1) // block 0, the sentinel
            .filter(move |(i, b)| b.allocated && !free.contains(&(*i as u32)))
            .map(|(i, b)| (BlockId(i as u32), b.size))
    }

    /// Size of the block behind a live allocation (rounded, remainder included).
    pub fn block_size(&self, id: BlockId) -> u64 {
        self.blocks[id.0 as usize].size
    }

    fn new_block(&mut self, block: Block) -> u32 {
        if let Some(slot) = self.free_slots.pop() {
            self.blocks[slot as usize] = block;
            slot
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as u32
        }
    }

    fn insert_free(&mut self, b: u32) {
        let blk = self.blocks[b as usize];
        self.free_lists[blk.stream.pool(blk.small)].insert(b, blk.size, blk.address);
    }

    fn remove_free(&mut self, b: u32) {
        let blk = self.blocks[b as usize];
        self.free_lists[blk.stream.pool(blk.small)].remove(b, blk.size, blk.address);
    }

    /// Best-fit search with the `max_split_size` refusals of `get_free_block`.
    fn find_free(&self, size: u64, pool: usize) -> Option<Found> {
        let found = self.free_lists[pool].best_fit(size)?;
        if let Some(max_split) = self.config.max_split_size {
            if size < max_split && found.size >= max_split {
                return None;
            }
            if size >= max_split && found.size >= size + LARGE_BUFFER {
                return None;
            }
        }
        Some(found)
    }

    fn can_reserve(&self, bytes: u64) -> bool {
        let cap = self.capacity.unwrap_or(UNBOUNDED_CAPACITY);
        self.stats.reserved.saturating_add(bytes) <= cap
    }

    /// The address the driver gives a new segment of `bytes` ([`VA_GRANULE`]).
    fn map_va(&mut self, bytes: u64) -> u64 {
        // Free ranges are kept highest first, so the lowest is at the end
        // and a new range below all others is a push. `va_largest` bounds
        // the longest free range: most segments fit none and skip the scan.
        if bytes <= self.va_largest {
            if let Some(i) = self.va_free.iter().rposition(|&(_, len)| len >= bytes) {
                let (start, len) = self.va_free[i];
                if len == bytes {
                    self.va_free.remove(i);
                } else {
                    self.va_free[i] = (start + bytes, len - bytes);
                }
                return start;
            }
            self.va_largest = self.va_free.iter().map(|&(_, len)| len).max().unwrap_or(0);
        }
        let range = bytes.div_ceil(VA_GRANULE) * VA_GRANULE;
        self.va_bottom -= range;
        let start = self.va_bottom;
        if range > bytes {
            self.va_free.push((start + bytes, range - bytes));
            self.va_largest = self.va_largest.max(range - bytes);
        }
        start
    }

    fn create_segment(&mut self, bytes: u64, small: bool, stream: Stream) -> u32 {
        let segment = self.segments.len() as u32;
        let address = if self.config.expandable_segments {
            EXPANDABLE_BASE + stream.pool(small) as u64 * EXPANDABLE_SPACING
        } else {
            self.map_va(bytes)
        };
        let b = self.new_block(Block {
            address,
            size: bytes,
            allocated: false,
            small,
            stream,
            prev: NONE,
            next: NONE,
            segment,
        });
        self.segments.push(Segment {
            size: bytes,
            live: true,
            head: b,
        });
        self.stats.reserved += bytes;
        self.stats.segments_created += 1;
        self.stats.peak_reserved = self.stats.peak_reserved.max(self.stats.reserved);
        b
    }

    /// `release_cached_blocks`: returns every fully free segment to the driver.
    pub fn empty_cache(&mut self) {
        let mut released = Vec::new();
        for pool in &self.free_lists {
            for (_, _, b) in pool.sorted() {
                let blk = self.blocks[b as usize];
                if blk.prev == NONE && blk.next == NONE {
                    released.push(b);
                }
            }
        }
        for b in released {
            self.remove_free(b);
            let blk = self.blocks[b as usize];
            // The range is not handed back to `map_va` ([`VA_GRANULE`]).
            let seg = blk.segment;
            let s = &mut self.segments[seg as usize];
            s.live = false;
            self.stats.reserved -= s.size;
            for growing in &mut self.expandable {
                if *growing == seg {
                    *growing = NO_SEGMENT;
                }
            }
            self.free_slots.push(b);
        }
    }

    /// Expandable segments: grow the pool's segment so that its free tail
    /// holds `size` bytes; returns the tail block.
    fn grow_expandable(&mut self, size: u64, small: bool, stream: Stream) -> Option<u32> {
        let page = if small { SMALL_BUFFER } else { LARGE_BUFFER };
        let pool = stream.pool(small);
        let seg = self.expandable[pool];
        if seg == NO_SEGMENT {
            let bytes = size.div_ceil(page) * page;
            if !self.can_reserve(bytes) {
                return None;
            }
            let b = self.create_segment(bytes, small, stream);
            self.expandable[pool] = self.blocks[b as usize].segment;
            return Some(b);
        }
        // Find the last block of the segment.
        let mut last = self.segments[seg as usize].head;
        while self.blocks[last as usize].next != NONE {
            last = self.blocks[last as usize].next;
        }
        let tail = self.blocks[last as usize];
        let have = if tail.allocated { 0 } else { tail.size };
        let grow = (size - have).div_ceil(page) * page;
        if !self.can_reserve(grow) {
            return None;
        }
        self.stats.reserved += grow;
        self.stats.peak_reserved = self.stats.peak_reserved.max(self.stats.reserved);
        self.segments[seg as usize].size += grow;
        if tail.allocated {
            let b = self.new_block(Block {
                address: tail.address + tail.size,
                size: grow,
                allocated: false,
                small,
                stream,
                prev: last,
                next: NONE,
                segment: seg,
            });
            self.blocks[last as usize].next = b;
            Some(b)
        } else {
            self.remove_free(last);
            self.blocks[last as usize].size += grow;
            Some(last)
        }
    }

    /// `malloc`: returns the live block, or [`OutOfMemory`].
    pub fn malloc(&mut self, request: u64) -> Result<BlockId, OutOfMemory> {
        self.malloc_on(request, Stream::DEFAULT)
    }

    /// `malloc` for a tensor allocated while `stream` is current: served
    /// from that stream's pools only.
    pub fn malloc_on(&mut self, request: u64, stream: Stream) -> Result<BlockId, OutOfMemory> {
        let size = round_size(request);
        let small = size <= SMALL_SIZE;
        let pool = stream.pool(small);
        let block = match self.find_free(size, pool) {
            Some(found) => self.free_lists[pool].take(found),
            None if self.config.expandable_segments => {
                match self.grow_expandable(size, small, stream) {
                    Some(b) => b,
                    None => {
                        self.stats.cache_flushes += 1;
                        self.empty_cache();
                        self.grow_expandable(size, small, stream)
                            .ok_or(OutOfMemory { request: size })?
                    }
                }
            }
            None => {
                let bytes = segment_size(size);
                if !self.can_reserve(bytes) {
                    self.stats.cache_flushes += 1;
                    self.empty_cache();
                    if !self.can_reserve(bytes) {
                        return Err(OutOfMemory { request: size });
                    }
                }
                self.create_segment(bytes, small, stream)
            }
        };
        let blk = self.blocks[block as usize];
        let remaining = blk.size - size;
        let split = if small {
            remaining >= MIN_BLOCK_SIZE
        } else {
            remaining > SMALL_SIZE
        };
        if split {
            let rest = self.new_block(Block {
                address: blk.address + size,
                size: remaining,
                allocated: false,
                small,
                stream,
                prev: block,
                next: blk.next,
                segment: blk.segment,
            });
            self.blocks[blk.next as usize].prev = rest;
            let b = &mut self.blocks[block as usize];
            b.next = rest;
            b.size = size;
            self.insert_free(rest);
        }
        let b = &mut self.blocks[block as usize];
        b.allocated = true;
        self.stats.allocated += b.size;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
        Ok(BlockId(block))
    }

    /// `free`: the block returns to its pool, merged with free neighbours.
    pub fn free(&mut self, id: BlockId) {
        let mut b = id.0;
        debug_assert!(self.blocks[b as usize].allocated, "double free");
        self.blocks[b as usize].allocated = false;
        self.stats.allocated -= self.blocks[b as usize].size;
        // Merge with the previous block.
        let prev = self.blocks[b as usize].prev;
        if !self.blocks[prev as usize].allocated {
            self.remove_free(prev);
            let blk = self.blocks[b as usize];
            let p = &mut self.blocks[prev as usize];
            p.size += blk.size;
            p.next = blk.next;
            self.blocks[blk.next as usize].prev = prev;
            self.free_slots.push(b);
            b = prev;
        }
        // Merge with the next block.
        let next = self.blocks[b as usize].next;
        if !self.blocks[next as usize].allocated {
            self.remove_free(next);
            let n = self.blocks[next as usize];
            let blk = &mut self.blocks[b as usize];
            blk.size += n.size;
            blk.next = n.next;
            self.blocks[n.next as usize].prev = b;
            self.free_slots.push(next);
        }
        // A merge keeps the lower block's id, so a segment's first block
        // (its head) never changes here.
        debug_assert!(
            self.blocks[b as usize].prev != NONE
                || self.segments[self.blocks[b as usize].segment as usize].head == b,
            "a segment's head changed"
        );
        self.insert_free(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn fresh() -> CachingAllocator {
        CachingAllocator::new(AllocatorConfig::default(), None)
    }

    /// Segment addresses as the H200 traces show them: a 50 MiB segment's
    /// 32 MiB-granular range leaves 14 MiB above it, which the next 14 MiB
    /// segment takes; a segment that fits no free range goes below all,
    /// and so does one created after the cache was emptied.
    #[test]
    fn segments_take_the_lowest_free_address_range() {
        let mut a = fresh();
        let s50 = a.malloc(50 * MB).unwrap();
        let s14 = a.malloc(14 * MB).unwrap();
        let s98 = a.malloc(98 * MB).unwrap();
        let small = a.malloc(4096).unwrap();
        let s26 = a.malloc(26 * MB).unwrap();
        let base = a.block_address(s50);
        assert_eq!(
            a.block_address(s14),
            base + 50 * MB,
            "in the 50 MiB range's tail"
        );
        assert_eq!(a.block_address(s98), base - 128 * MB, "a new range below");
        // The 2 MiB small segment and the 26 MiB one fill the 98 MiB range's
        // 30 MiB tail, lowest first.
        assert_eq!(a.block_address(small), base - 128 * MB + 98 * MB);
        assert_eq!(a.block_address(s26), base - 128 * MB + 100 * MB);
        // After the cache is emptied, a new segment goes below every
        // earlier one, not into the released range.
        a.free(s98);
        a.empty_cache();
        let again = a.malloc(96 * MB).unwrap();
        assert_eq!(a.block_address(again), base - 128 * MB - 96 * MB);
        let next = a.malloc(96 * MB).unwrap();
        assert!(a.block_address(next) < a.block_address(again));
    }

    /// Single requests, as measured on the H200 (memory-facts.md):
    /// request -> (allocated, reserved).
    #[test]
    fn single_requests_match_h200_measurements() {
        for (request, allocated, reserved) in [
            (1, 512, 2 * MB),
            (MB + 1, 1_049_088, 20 * MB),
            (10 * MB, 10 * MB, 10 * MB),
            (10 * MB + 1, 10 * MB + 512, 12 * MB),
            (25 * MB, 26 * MB, 26 * MB),
        ] {
            let mut a = fresh();
            a.malloc(request).unwrap();
            let s = a.stats();
            assert_eq!(
                (s.allocated, s.reserved),
                (allocated, reserved),
                "request {request}"
            );
        }
    }

    #[test]
    fn freed_blocks_are_cached_and_reused_best_fit() {
        let mut a = fresh();
        let big = a.malloc(100 * MB).unwrap();
        let medium = a.malloc(40 * MB).unwrap();
        a.free(big);
        a.free(medium);
        assert_eq!(a.stats().reserved, 140 * MB);
        // 30 MiB fits best in the 40 MiB block, leaving a 10 MiB free remainder.
        a.malloc(30 * MB).unwrap();
        assert_eq!(a.stats().reserved, 140 * MB);
        assert_eq!(a.stats().allocated, 30 * MB);
        // 90 MiB still fits in the 100 MiB block.
        a.malloc(90 * MB).unwrap();
        assert_eq!(a.stats().reserved, 140 * MB);
        // 20 MiB fits nowhere now (10 + 10 MiB holes in different segments).
        a.malloc(20 * MB).unwrap();
        assert_eq!(a.stats().reserved, 160 * MB);
    }

    #[test]
    fn large_remainders_of_one_mib_or_less_stay_with_the_block() {
        let mut a = fresh();
        let b = a.malloc(12 * MB).unwrap();
        a.free(b);
        // 11.5 MiB in a 12 MiB block: 0.5 MiB remainder is not split off.
        a.malloc(11 * MB + MB / 2).unwrap();
        assert_eq!(a.stats().allocated, 12 * MB);
    }

    /// Block 0 is the sentinel neighbour: never handed out, never listed,
    /// and it survives a reset.
    #[test]
    fn the_sentinel_block_is_never_a_tensor() {
        let mut a = fresh();
        for round in 0..2 {
            let x = a.malloc(3 * MB).unwrap();
            let y = a.malloc(4096).unwrap();
            let z = a.malloc(40 * MB).unwrap();
            a.free(y);
            let live: Vec<(BlockId, u64)> = a.live_blocks().collect();
            assert!(live.iter().all(|(id, _)| id.index() > 0), "round {round}");
            assert_eq!(
                live.iter().map(|(_, size)| size).sum::<u64>(),
                a.stats().allocated,
                "round {round}"
            );
            assert_eq!(live.len(), 2, "round {round}");
            a.free(x);
            a.free(z);
            a.reset(AllocatorConfig::default(), None);
        }
    }

    #[test]
    fn neighbours_merge_on_free() {
        let mut a = fresh();
        let whole = a.malloc(64 * MB).unwrap();
        a.free(whole);
        let x = a.malloc(16 * MB).unwrap();
        let y = a.malloc(16 * MB).unwrap();
        let z = a.malloc(16 * MB).unwrap();
        a.free(x);
        a.free(z);
        a.free(y);
        // All merged back: a 64 MiB request fits without a new segment.
        a.malloc(64 * MB).unwrap();
        assert_eq!(a.stats().reserved, 64 * MB);
    }

    #[test]
    fn empty_cache_releases_only_fully_free_segments() {
        let mut a = fresh();
        let x = a.malloc(30 * MB).unwrap();
        let _y = a.malloc(30 * MB).unwrap();
        a.free(x);
        a.empty_cache();
        assert_eq!(a.stats().reserved, 30 * MB);
    }

    #[test]
    fn a_failed_cuda_malloc_flushes_the_cache_and_retries() {
        let mut a = CachingAllocator::new(AllocatorConfig::default(), Some(100 * MB));
        let x = a.malloc(60 * MB).unwrap();
        a.free(x);
        // 70 MiB does not fit in the cached 60 MiB block, and 60 + 70 > 100:
        // the cache is flushed and the retry succeeds.
        a.malloc(70 * MB).unwrap();
        assert_eq!(a.stats().reserved, 70 * MB);
        assert_eq!(a.stats().cache_flushes, 1);
        assert_eq!(a.malloc(40 * MB), Err(OutOfMemory { request: 40 * MB }));
    }

    #[test]
    fn max_split_size_refuses_oversize_blocks() {
        let config = AllocatorConfig {
            expandable_segments: false,
            max_split_size: Some(64 * MB),
        };
        let mut a = CachingAllocator::new(config, None);
        let x = a.malloc(200 * MB).unwrap();
        a.free(x);
        // A small-ish request may not take an oversize (>= max_split) block.
        a.malloc(30 * MB).unwrap();
        assert_eq!(a.stats().reserved, 230 * MB);
    }

    /// c10 keys free blocks by stream: a block freed on a side stream is
    /// cached for that stream and a compute-stream request of the same size
    /// creates a segment of its own; the side stream reuses its block.
    #[test]
    fn a_block_freed_on_a_side_stream_serves_only_that_stream() {
        let side = Stream::side(3);
        let mut a = fresh();
        let buffer = a.malloc_on(240 * MB, side).unwrap();
        a.free(buffer);
        a.malloc(240 * MB).unwrap();
        assert_eq!(
            a.stats().reserved,
            480 * MB,
            "the default stream cannot take it"
        );
        a.malloc_on(240 * MB, side).unwrap();
        assert_eq!(
            a.stats().reserved,
            480 * MB,
            "the side stream takes its cached block"
        );
        // A flush on a failed cudaMalloc releases every stream's free segments.
        let mut b = CachingAllocator::new(AllocatorConfig::default(), Some(300 * MB));
        let x = b.malloc_on(200 * MB, side).unwrap();
        b.free(x);
        b.malloc(200 * MB).unwrap();
        assert_eq!(b.stats().cache_flushes, 1);
        assert_eq!(b.stats().reserved, 200 * MB);
    }

    #[test]
    fn expandable_segments_grow_in_pages_and_reuse_the_tail() {
        let config = AllocatorConfig {
            expandable_segments: true,
            max_split_size: None,
        };
        let mut a = CachingAllocator::new(config, None);
        let x = a.malloc(30 * MB).unwrap();
        assert_eq!(a.stats().reserved, 40 * MB);
        let _y = a.malloc(15 * MB).unwrap();
        // 30 + 15 = 45 MiB of 60 mapped.
        assert_eq!(a.stats().reserved, 60 * MB);
        a.free(x);
        // A 35 MiB request: the 30 MiB hole is too small; the 15 MiB tail
        // grows by one 20 MiB page.
        a.malloc(35 * MB).unwrap();
        assert_eq!(a.stats().reserved, 80 * MB);
    }
}
