//! The replay: family code allocates and frees tensors op by op; each call
//! goes straight into the [`CachingAllocator`] model, and the moment of the
//! peak (with what is live by component, and the op running) is kept.

#[cfg(feature = "diagnostics")]
use crate::allocator::round_size;
use crate::allocator::{AllocatorConfig, BlockId, CachingAllocator, OutOfMemory, Stats, Stream};
use crate::component::Component;

/// Handle to a tensor alive in the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a tensor handle that is dropped can never be freed"]
pub struct Tensor {
    block: BlockId,
    component: Component,
}

/// Where in the run we are: a static op name and an optional layer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Op {
    /// What runs, e.g. `forward: mlp (up_proj)`.
    pub name: &'static str,
    /// Transformer block / trunk block index, when the op is inside one.
    pub layer: Option<u32>,
    /// Step (training) or recycle (ESMFold) index.
    pub step: Option<u32>,
    /// What a step is called: "step" (training) or "recycle" (ESMFold).
    pub step_kind: &'static str,
}

/// What a request does with a previous job's kept blocks.
#[cfg(feature = "diagnostics")]
enum Adopt {
    /// None in line for it: allocate as usual.
    None,
    /// This kept block is the request's.
    Kept(Tensor),
    /// The request is this kept block's new copy (an in-place cast).
    Cast(Tensor),
}

/// The live bytes of each component at one moment.
pub type ComponentBytes = [u64; Component::IN_ALLOCATOR];

/// The moment the job's tensors took the most memory: the highest
/// allocated bytes, the first such moment. The breakdown is taken there:
/// reserved memory only grows (it is the cache's), so its peak often comes
/// later, when a small new segment is created after the tensors that grew
/// the cache are freed; at that moment the live tensors explain little and
/// the cache's free blocks most. At the allocated peak the components say
/// what the job's tensors need, and the allocator's slack is the rest of
/// the reserved peak.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeakMoment {
    /// Allocated bytes by component at that moment.
    pub live: ComponentBytes,
    /// Allocated bytes at that moment.
    pub allocated: u64,
    /// The op that made the allocation.
    pub op: Op,
}

/// A replay in progress.
#[derive(Clone, Debug)]
pub struct Replay {
    allocator: CachingAllocator,
    live: ComponentBytes,
    op: Op,
    peak: PeakMoment,
    oom: Option<(OutOfMemory, Op)>,
    allocations: u64,
    /// Bytes in CUDA unified memory (bitsandbytes' paged optimizer state):
    /// outside the allocator, on the device while it has room.
    managed: u64,
    stop_at_steady_state: bool,
    /// Memory over the job, when asked for ([`Replay::enable_timeline`]).
    timeline: Option<crate::timeline::Timeline>,
    /// Diagnostics: record who allocated each block and list the live
    /// blocks right after allocation number `inspect_at`.
    #[cfg(feature = "diagnostics")]
    inspect_at: Option<u64>,
    #[cfg(feature = "diagnostics")]
    owners: alloc::vec::Vec<(Op, Component)>,
    #[cfg(feature = "diagnostics")]
    inspected: alloc::vec::Vec<(Op, Component, u64)>,
    #[cfg(feature = "diagnostics")]
    peak_allocation: u64,
    /// Diagnostics: every segment created, with the op that asked for it.
    #[cfg(feature = "diagnostics")]
    pub segment_log: Option<alloc::vec::Vec<(Op, u64)>>,
    /// Diagnostics: every allocation (true) and free (false) of at least
    /// `event_log_min` bytes: size, block location (`CachingAllocator::
    /// block_location`), op.
    #[cfg(feature = "diagnostics")]
    pub event_log: Option<alloc::vec::Vec<(bool, u64, u64, Op)>>,
    /// Smallest block the event log records.
    #[cfg(feature = "diagnostics")]
    pub event_log_min: u64,
    /// Process history: record each block's component and rounded request
    /// (indexed by block), so that [`Replay::start_next_job`] can hand the
    /// blocks that survive a job to the next one.
    #[cfg(feature = "diagnostics")]
    track_blocks: bool,
    #[cfg(feature = "diagnostics")]
    block_info: alloc::vec::Vec<(Component, u64)>,
    #[cfg(feature = "diagnostics")]
    block_order: alloc::vec::Vec<u64>,
    /// Blocks a previous job left resident, by component, in reverse
    /// allocation order (the next to adopt is last).
    #[cfg(feature = "diagnostics")]
    adoptable: [alloc::vec::Vec<(BlockId, u64)>; Component::IN_ALLOCATOR],
    /// The kept weights are cast, not adopted ([`Replay::cast_kept_weights`]).
    #[cfg(feature = "diagnostics")]
    cast_kept_weights: bool,
    /// What the last [`crate::graph::Graph`] on this replay left to reuse.
    pub(crate) graph_buffers: crate::graph::GraphBuffers,
}

impl Replay {
    /// Records `bytes` allocated in CUDA unified memory (`cudaMallocManaged`).
    pub fn add_managed(&mut self, bytes: u64) {
        self.managed += bytes;
    }

    /// Bytes allocated in CUDA unified memory so far.
    pub fn managed(&self) -> u64 {
        self.managed
    }

    /// Starts a replay with an empty allocator.
    pub fn new(config: AllocatorConfig, capacity: Option<u64>) -> Replay {
        Replay {
            allocator: CachingAllocator::new(config, capacity),
            live: [0; Component::IN_ALLOCATOR],
            op: Op::default(),
            peak: PeakMoment::default(),
            oom: None,
            allocations: 0,
            managed: 0,
            stop_at_steady_state: true,
            timeline: None,
            #[cfg(feature = "diagnostics")]
            inspect_at: None,
            #[cfg(feature = "diagnostics")]
            owners: alloc::vec::Vec::new(),
            #[cfg(feature = "diagnostics")]
            inspected: alloc::vec::Vec::new(),
            #[cfg(feature = "diagnostics")]
            peak_allocation: 0,
            #[cfg(feature = "diagnostics")]
            segment_log: None,
            #[cfg(feature = "diagnostics")]
            event_log: None,
            #[cfg(feature = "diagnostics")]
            event_log_min: 0,
            #[cfg(feature = "diagnostics")]
            track_blocks: false,
            #[cfg(feature = "diagnostics")]
            block_info: alloc::vec::Vec::new(),
            #[cfg(feature = "diagnostics")]
            block_order: alloc::vec::Vec::new(),
            #[cfg(feature = "diagnostics")]
            adoptable: Default::default(),
            #[cfg(feature = "diagnostics")]
            cast_kept_weights: false,
            graph_buffers: Default::default(),
        }
    }

    /// Starts over as [`Replay::new`] would, keeping the memory of every
    /// array for the next replay (curves run hundreds of replays in a row).
    pub fn reset(&mut self, config: AllocatorConfig, capacity: Option<u64>) {
        self.allocator.reset(config, capacity);
        self.live = [0; Component::IN_ALLOCATOR];
        self.op = Op::default();
        self.peak = PeakMoment::default();
        self.oom = None;
        self.allocations = 0;
        self.managed = 0;
        if self.timeline.is_some() {
            self.timeline = Some(crate::timeline::Timeline::new());
        }
        #[cfg(feature = "diagnostics")]
        {
            self.inspect_at = None;
            self.owners.clear();
            self.inspected.clear();
            self.peak_allocation = 0;
            self.segment_log = None;
            self.event_log = None;
            self.event_log_min = 0;
            self.track_blocks = false;
            self.cast_kept_weights = false;
            self.block_info.clear();
            self.block_order.clear();
            for queue in self.adoptable.iter_mut() {
                queue.clear();
            }
        }
    }

    #[cfg(feature = "diagnostics")]
    /// Records what each block holds, for [`Replay::start_next_job`]; call
    /// before the first allocation.
    pub fn track_blocks(&mut self) {
        self.track_blocks = true;
    }

    #[cfg(feature = "diagnostics")]
    /// Ends a job the way a process running several jobs does (the
    /// measurement harness: drop everything but the model and its optimizer,
    /// `gc.collect()`, `torch.cuda.empty_cache()`,
    /// `torch.cuda.reset_peak_memory_stats()`): frees every live block
    /// whose component is not in `keep`, empties the cache, restarts the
    /// peak window, and offers the kept blocks to the next job. The next job
    /// adopts a kept block instead of allocating when it asks for the same
    /// component and size in the same order (its weights, optimizer state,
    /// library workspaces); at the first mismatch of a component, the rest of
    /// that component's kept blocks are freed (the job replaced them).
    /// Needs [`Replay::track_blocks`] from the start.
    pub fn start_next_job(&mut self, keep: &[Component]) {
        debug_assert!(self.track_blocks, "start_next_job needs track_blocks");
        let live: alloc::vec::Vec<(BlockId, u64)> = self.allocator.live_blocks().collect();
        let mut kept: alloc::vec::Vec<(usize, BlockId, Component, u64)> = alloc::vec::Vec::new();
        for (block, _) in live {
            let (component, rounded) = self.block_info[block.index()];
            if keep.contains(&component) {
                kept.push((block.index(), block, component, rounded));
            } else {
                self.free(Tensor { block, component });
            }
        }
        // Allocation order is not block order once slots are reused; the
        // allocation counter per block keeps it.
        kept.sort_by_key(|&(index, ..)| core::cmp::Reverse(self.block_order[index]));
        for queue in self.adoptable.iter_mut() {
            queue.clear();
        }
        for (_, block, component, rounded) in kept {
            self.adoptable[component as usize].push((block, rounded));
        }
        self.allocator.empty_cache();
        self.reset_peaks();
        // The next job counts its own steps.
        self.step(None);
        self.step_kind("");
    }

    #[cfg(feature = "diagnostics")]
    /// What a request does with the kept blocks of a previous job (see
    /// [`Replay::start_next_job`]): the next one in line is the request's
    /// own block when the sizes match, or, for weights after
    /// [`Replay::cast_kept_weights`], the block its new copy replaces
    /// ([`Adopt::Cast`]). Any other mismatch frees the rest of that
    /// component's kept blocks (the job replaced them). Library workspaces
    /// belong to the process, not to a job: a request takes the kept one
    /// of its size, in whatever order the earlier job created them (a
    /// fresh process's cuBLASLt workspace sits between the two cuBLAS
    /// ones), and the others stay.
    fn adopt(&mut self, bytes: u64, component: Component) -> Adopt {
        let queue = &mut self.adoptable[component as usize];
        if component == Component::LibraryWorkspace {
            let rounded = round_size(bytes);
            return match queue.iter().rposition(|&(_, r)| r == rounded) {
                Some(i) => Adopt::Kept(Tensor {
                    block: queue.remove(i).0,
                    component,
                }),
                None => Adopt::None,
            };
        }
        let Some(&(block, rounded)) = queue.last() else {
            return Adopt::None;
        };
        if component == Component::Weights && self.cast_kept_weights {
            queue.pop();
            return Adopt::Cast(Tensor { block, component });
        }
        if rounded == round_size(bytes) {
            queue.pop();
            return Adopt::Kept(Tensor { block, component });
        }
        let rest = core::mem::take(queue);
        for (block, _) in rest {
            self.free(Tensor { block, component });
        }
        Adopt::None
    }

    #[cfg(feature = "diagnostics")]
    /// One parameter of an in-place cast between jobs: its new copy, then
    /// its old block freed. After the last parameter, the cast is part of
    /// what came before this job: the cache is emptied and the peak window
    /// restarted, as [`Replay::start_next_job`] does.
    fn cast(&mut self, old: Tensor, bytes: u64) -> Tensor {
        let rest = core::mem::take(&mut self.adoptable[Component::Weights as usize]);
        let new = self.alloc_on(bytes, Component::Weights, Stream::DEFAULT);
        self.adoptable[Component::Weights as usize] = rest;
        self.free(old);
        if self.adoptable[Component::Weights as usize].is_empty() {
            self.cast_kept_weights = false;
            self.allocator.empty_cache();
            self.reset_peaks();
        }
        new
    }

    #[cfg(feature = "diagnostics")]
    /// The next job's weights are the kept ones cast in place to another
    /// dtype (`model.half()`, `model.to(torch.bfloat16)` between the jobs):
    /// parameter by parameter, the new copy is allocated, then the old
    /// block freed; then the cache is emptied and the peak window restarted
    /// (the cast is not part of the job).
    pub fn cast_kept_weights(&mut self) {
        self.cast_kept_weights = true;
    }

    #[cfg(feature = "diagnostics")]
    /// Diagnostics: list the live blocks right after allocation number `n`
    /// (see [`Replay::peak_allocation`]); read them with [`Replay::inspected`].
    pub fn inspect_at(&mut self, n: u64) {
        self.inspect_at = Some(n);
    }

    #[cfg(feature = "diagnostics")]
    /// The allocation number at which the peak moment was reached.
    pub fn peak_allocation(&self) -> u64 {
        self.peak_allocation
    }

    /// Allocations made so far.
    pub fn allocations(&self) -> u64 {
        self.allocations
    }

    #[cfg(feature = "diagnostics")]
    /// Live blocks captured by [`Replay::inspect_at`]: (op, component, bytes).
    pub fn inspected(&self) -> &[(Op, Component, u64)] {
        &self.inspected
    }

    /// Names the op that the next allocations belong to.
    pub fn op(&mut self, name: &'static str, layer: Option<u32>) {
        self.op.name = name;
        self.op.layer = layer;
    }

    /// Sets the step (training) or recycle (ESMFold) index.
    pub fn step(&mut self, step: Option<u32>) {
        self.op.step = step;
    }

    /// Names the steps (`"recycle"` for ESMFold's trunk passes).
    pub fn step_kind(&mut self, kind: &'static str) {
        self.op.step_kind = kind;
    }

    /// Allocates a tensor of `bytes`. Zero-byte tensors take no block in
    /// PyTorch; they are given a 512 B block here, which is lost in the noise.
    pub fn alloc(&mut self, bytes: u64, component: Component) -> Tensor {
        self.alloc_on(bytes, component, Stream::DEFAULT)
    }

    /// Allocates a tensor of `bytes` while `stream` is the current stream
    /// (its block returns to that stream's pools when freed).
    pub fn alloc_on(&mut self, bytes: u64, component: Component, stream: Stream) -> Tensor {
        #[cfg(feature = "diagnostics")]
        if stream == Stream::DEFAULT {
            match self.adopt(bytes, component) {
                Adopt::Kept(adopted) => return adopted,
                Adopt::Cast(old) => return self.cast(old, bytes),
                Adopt::None => {}
            }
        }
        #[cfg(feature = "diagnostics")]
        let segments_before = self.allocator.stats().segments_created;
        let block = match self.allocator.malloc_on(bytes, stream) {
            Ok(block) => block,
            Err(oom) => {
                if self.oom.is_none() {
                    self.oom = Some((oom, self.op));
                }
                // Keep replaying with an unbounded allocator so the rest of
                // the trace stays consistent; the run is marked as OOM.
                self.allocator = unbounded(&self.allocator);
                self.allocator
                    .malloc_on(bytes, stream)
                    .expect("unbounded allocator")
            }
        };
        self.live[component as usize] += self.allocator.block_size(block);
        self.allocations += 1;
        #[cfg(feature = "diagnostics")]
        self.record(block, bytes, component, segments_before);
        let stats = self.allocator.stats();
        if stats.allocated > self.peak.allocated {
            self.peak = PeakMoment {
                live: self.live,
                allocated: stats.allocated,
                op: self.op,
            };
            #[cfg(feature = "diagnostics")]
            {
                self.peak_allocation = self.allocations;
            }
        }
        if let Some(t) = self.timeline.as_mut() {
            t.observe(self.op, stats.allocated, stats.reserved);
        }
        Tensor { block, component }
    }

    /// Records memory over the job from now on (kept across
    /// [`Replay::reset`], emptied by it); see [`Replay::take_timeline`].
    pub fn enable_timeline(&mut self) {
        self.timeline = Some(crate::timeline::Timeline::new());
    }

    /// The timeline recorded since [`Replay::enable_timeline`] (or the last
    /// reset), which stops recording.
    pub fn take_timeline(&mut self) -> Option<crate::timeline::Timeline> {
        self.timeline.take()
    }

    /// Diagnostics and process history for one allocation: what the block
    /// holds, the logs, and the live blocks at the inspected allocation.
    #[cfg(feature = "diagnostics")]
    fn record(&mut self, block: BlockId, bytes: u64, component: Component, segments_before: u64) {
        if self.track_blocks {
            let i = block.index();
            if self.block_info.len() <= i {
                self.block_info.resize(i + 1, (Component::Transient, 0));
                self.block_order.resize(i + 1, 0);
            }
            self.block_info[i] = (component, round_size(bytes));
            self.block_order[i] = self.allocations;
        }
        if let Some(log) = self.event_log.as_mut() {
            let size = self.allocator.block_size(block);
            if size >= self.event_log_min {
                log.push((true, size, self.allocator.block_location(block), self.op));
            }
        }
        if let Some(log) = self.segment_log.as_mut() {
            if self.allocator.stats().segments_created > segments_before {
                log.push((self.op, self.allocator.last_segment_size()));
            }
        }
        if self.inspect_at.is_some() {
            let i = block.index();
            if self.owners.len() <= i {
                self.owners
                    .resize(i + 1, (Op::default(), Component::Transient));
            }
            self.owners[i] = (self.op, component);
            if self.inspect_at == Some(self.allocations) {
                let blocks: alloc::vec::Vec<_> = self.allocator.live_blocks().collect();
                self.inspected = blocks
                    .into_iter()
                    .map(|(b, size)| {
                        let (op, c) = self.owners[b.index()];
                        (op, c, size)
                    })
                    .collect();
            }
        }
    }

    /// Frees a tensor.
    pub fn free(&mut self, tensor: Tensor) {
        #[cfg(feature = "diagnostics")]
        if let Some(log) = self.event_log.as_mut() {
            let size = self.allocator.block_size(tensor.block);
            if size >= self.event_log_min {
                log.push((
                    false,
                    size,
                    self.allocator.block_location(tensor.block),
                    self.op,
                ));
            }
        }
        self.live[tensor.component as usize] -= self.allocator.block_size(tensor.block);
        self.allocator.free(tensor.block);
        if let Some(t) = self.timeline.as_mut() {
            let stats = self.allocator.stats();
            t.observe(self.op, stats.allocated, stats.reserved);
        }
    }

    /// Counts a live tensor under another component from now on.
    pub fn relabel(&mut self, tensor: &mut Tensor, component: Component) {
        let size = self.allocator.block_size(tensor.block);
        self.live[tensor.component as usize] -= size;
        self.live[component as usize] += size;
        tensor.component = component;
        #[cfg(feature = "diagnostics")]
        {
            if let Some(owner) = self.owners.get_mut(tensor.block.index()) {
                owner.1 = component;
            }
            if let Some(info) = self.block_info.get_mut(tensor.block.index()) {
                info.0 = component;
            }
        }
    }

    /// Frees every tensor of a list.
    pub fn free_all(&mut self, tensors: impl IntoIterator<Item = Tensor>) {
        for t in tensors {
            self.free(t);
        }
    }

    /// A transient: allocated and freed at once (its only effect is on the peak
    /// and on the cache).
    pub fn touch(&mut self, bytes: u64, component: Component) {
        let t = self.alloc(bytes, component);
        self.free(t);
    }

    /// `torch.cuda.empty_cache()`.
    pub fn empty_cache(&mut self) {
        self.allocator.empty_cache();
    }

    /// [`CachingAllocator::state_signature`] and the live bytes of each
    /// component: equal between the ends of two training steps, every later
    /// step replays like the last one.
    pub fn state_signature(&self) -> alloc::vec::Vec<u64> {
        let mut out = self.allocator.state_signature();
        out.extend(self.live);
        out
    }

    /// Whether training replays stop once a step leaves the state it found
    /// (see [`crate::families::ReplayOptions::steady_state_shortcut`]).
    pub fn stops_at_steady_state(&self) -> bool {
        self.stop_at_steady_state
    }

    /// Sets [`Replay::stops_at_steady_state`].
    pub fn set_stop_at_steady_state(&mut self, stop: bool) {
        self.stop_at_steady_state = stop;
    }

    /// `torch.cuda.reset_peak_memory_stats()`: the peak window restarts here.
    pub fn reset_peaks(&mut self) {
        self.allocator.reset_peaks();
        let stats = self.allocator.stats();
        self.peak = PeakMoment {
            live: self.live,
            allocated: stats.allocated,
            op: self.op,
        };
    }

    /// The allocator (diagnostics).
    pub fn allocator(&self) -> &CachingAllocator {
        &self.allocator
    }

    /// Allocator totals.
    pub fn stats(&self) -> Stats {
        self.allocator.stats()
    }

    /// The allocated peak's moment since the last peak reset.
    pub fn peak(&self) -> PeakMoment {
        self.peak
    }

    /// The first allocation that did not fit the capacity, if any.
    pub fn out_of_memory(&self) -> Option<(OutOfMemory, Op)> {
        self.oom
    }
}

fn unbounded(allocator: &CachingAllocator) -> CachingAllocator {
    let mut a = allocator.clone();
    a.set_capacity(None);
    a
}
