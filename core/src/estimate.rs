//! The estimate: replay a workload, add what lives outside the allocator,
//! and report the driver-level peak with its breakdown.

use crate::arch::Architecture;
use crate::error::Error;
use crate::families;
use crate::runtime::RuntimeProfile;

pub use crate::component::Component;
pub use crate::families::{ReplayOptions, ReplaySummary};
pub use crate::runtime::{outside_allocator, LibraryUse};
use crate::trace::{Op, Replay};
use crate::workload::Workload;
use crate::Bytes;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// One line of the breakdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Share {
    /// What.
    pub component: Component,
    /// How much, at the driver-level peak.
    pub bytes: Bytes,
}

/// Tuning of one estimate call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EstimateOptions {
    /// Device memory the process may use; when set, the allocator frees its
    /// cache and retries when a `cudaMalloc` would exceed it, as PyTorch does,
    /// and [`Estimate::fits`] says whether the job survives.
    pub capacity: Option<u64>,
    /// A limit on what torch's allocator may reserve, below the device's
    /// capacity: `torch.cuda.set_per_process_memory_fraction(limit / total)`.
    /// Reaching it frees the cache and retries, as running out of device
    /// memory does; a smaller card is emulated this way on a larger one.
    pub allocator_limit: Option<u64>,
    /// How the replay runs (its shortcuts: see [`ReplayOptions`]).
    pub replay: ReplayOptions,
}

/// The predicted peak.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Estimate {
    /// What nvidia-smi shows for the process at its peak: outside-allocator
    /// overheads plus torch's peak reserved bytes. The figure that decides OOM.
    pub driver_peak: Bytes,
    /// `torch.cuda.max_memory_reserved()`.
    pub reserved_peak: Bytes,
    /// `torch.cuda.max_memory_allocated()`.
    pub allocated_peak: Bytes,
    /// CUDA context and library kernels, outside torch's allocator.
    pub outside_allocator: Bytes,
    /// What makes up `driver_peak`, summing to it: the outside-allocator
    /// overheads, the tensors' bytes by component at the moment they took
    /// the most memory (the allocated peak, `trace::PeakMoment`), and the
    /// allocator's slack, the rest of the reserved peak (cached free
    /// blocks, split remainders, segments created after that moment).
    pub breakdown: Vec<Share>,
    /// The op that allocated the allocated peak's last tensor.
    pub peak_op: String,
    /// Parameters (LoRA adapters included).
    pub params: u64,
    /// Parameter and buffer bytes resident before the job.
    pub weight_bytes: Bytes,
    /// With a capacity: `false` when an allocation could not be served even
    /// after the allocator freed its cache (an out-of-memory error).
    pub fits: bool,
    /// With a capacity: whether the replay reached it (a `cudaMalloc` that
    /// would have exceeded it freed the cache and retried). A job that never
    /// reaches the capacity runs exactly as with an unlimited one.
    #[cfg_attr(feature = "serde", serde(skip))]
    pub reached_capacity: bool,
}

impl Estimate {
    /// Bytes of one component at the peak.
    pub fn component(&self, component: Component) -> Bytes {
        self.breakdown
            .iter()
            .find(|s| s.component == component)
            .map_or(Bytes::ZERO, |s| s.bytes)
    }
}

/// Estimates the peak memory of `workload` on `arch` under `runtime`.
pub fn estimate(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
) -> Result<Estimate, Error> {
    estimate_with(arch, workload, runtime, EstimateOptions::default())
}

/// [`estimate`] with options (a capacity for fit searches).
pub fn estimate_with(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    options: EstimateOptions,
) -> Result<Estimate, Error> {
    let mut replay = Replay::new(runtime.allocator, None);
    run(&mut replay, arch, &[], workload, runtime, options)
}

/// [`estimate_with`], and the job's memory over time: allocated and
/// reserved bytes after every allocation and free, reduced to at most
/// [`crate::timeline::MAX_POINTS`] points that keep every maximum at
/// their scale (the highest point is the estimate's peak). A training job
/// whose state repeats stops at the step where it does (see
/// [`ReplayOptions::steady_state_shortcut`]), and so does its timeline.
pub fn estimate_with_timeline(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    options: EstimateOptions,
) -> Result<(Estimate, crate::timeline::Timeline), Error> {
    let mut replay = Replay::new(runtime.allocator, None);
    replay.enable_timeline();
    let estimate = run(&mut replay, arch, &[], workload, runtime, options)?;
    let timeline = replay.take_timeline().unwrap_or_default();
    Ok((estimate, timeline))
}

/// [`estimate_with`] on a replay kept from an earlier estimate (it is reset
/// first): the same result, without allocating the replay's arrays again.
/// Curves use it for their hundreds of lengths.
pub fn estimate_reusing(
    replay: &mut Replay,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    options: EstimateOptions,
) -> Result<Estimate, Error> {
    run(replay, arch, &[], workload, runtime, options)
}

#[cfg(feature = "diagnostics")]
/// What a process keeps from one job to the next when it runs several (the
/// measurement harness keeps the model and its optimizer): weights, the
/// optimizer state and the library workspaces.
pub const KEPT_BETWEEN_JOBS: [Component; 3] = [
    Component::Weights,
    Component::OptimizerState,
    Component::LibraryWorkspace,
];

/// A job that ran earlier in the same process (see `estimate_in_process`).
#[derive(Clone, Copy, Debug)]
pub struct EarlierJob<'a> {
    /// Its model.
    pub arch: &'a Architecture,
    /// What it ran.
    pub workload: &'a Workload,
}

#[cfg(feature = "diagnostics")]
/// [`estimate`] of a job that runs after `earlier` in the same process, on
/// the same model: the earlier job runs first, then everything but
/// [`KEPT_BETWEEN_JOBS`] is freed, the cache emptied and the peak window
/// restarted; this job then finds its weights, optimizer state and
/// workspaces where the earlier job put them, among whatever segments
/// those blocks keep reserved. (The H200 calibration harness runs each
/// model's cases this way; a notebook that trains, then trains again, too.)
pub fn estimate_after(
    arch: &Architecture,
    earlier: &Workload,
    workload: &Workload,
    runtime: &RuntimeProfile,
) -> Result<Estimate, Error> {
    let earlier = [EarlierJob {
        arch,
        workload: earlier,
    }];
    estimate_in_process(
        &earlier,
        arch,
        workload,
        runtime,
        EstimateOptions::default(),
    )
}

#[cfg(feature = "diagnostics")]
/// [`estimate`] of a job that runs after `earlier` (in order, the first
/// being the process's first job) in the same process, as a notebook runs
/// them. Between two jobs of the same model the process keeps
/// [`KEPT_BETWEEN_JOBS`] (see [`estimate_after`]); between jobs of
/// different models the earlier model, its optimizer and outputs are
/// dropped and the cache emptied (`del model; gc.collect();
/// torch.cuda.empty_cache()`), and only the process's library workspaces
/// stay, each in the segment it was created in. Those segments are what
/// the later jobs inherit: the autograd thread's cuBLAS workspace, created
/// at the first backward matmul inside a freed block of that job, keeps
/// the block's whole segment reserved for the life of the process, and
/// later models' weights and activations fill the rest of it (GPT-2
/// training, then BERT, ResNet-50 and ViT-B inference in one process:
/// every reserved peak to the byte, `measurements/shared-process/`).
pub fn estimate_in_process(
    earlier: &[EarlierJob],
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    options: EstimateOptions,
) -> Result<Estimate, Error> {
    for job in earlier {
        job.workload.validate()?;
        families::validate(job.arch, job.workload)?;
    }
    let mut replay = Replay::new(runtime.allocator, None);
    run(&mut replay, arch, earlier, workload, runtime, options)
}

#[cfg(feature = "diagnostics")]
/// Replays `earlier` in order into `replay` (with `options`, as the job
/// after them), each ended as a process ends
/// one job before the next: the next job, of `next_arch` running
/// `next_workload`, finds what [`estimate_in_process`] says stays. The
/// first earlier job is the process's first: the jobs create their cuBLAS
/// workspaces at their first matrix multiplies, among their own blocks,
/// whatever `runtime` says of the later job (the H200 trace of BERT fp32
/// training after amp training in one process,
/// `measurements/h200-generalization/trace-segments-29.jsonl.gz`: the
/// autograd thread's workspace stays at 238 MiB into the amp job's 478 MiB
/// loss segment, beside the word embedding's AdamW state, and the fp32 job
/// fills the rest).
pub fn replay_earlier_jobs(
    earlier: &[EarlierJob],
    next_arch: &Architecture,
    next_workload: &Workload,
    runtime: &RuntimeProfile,
    options: families::ReplayOptions,
    replay: &mut Replay,
) -> Result<(), Error> {
    let later_job = RuntimeProfile {
        process_ran_backward: false,
        ..runtime.clone()
    };
    replay.track_blocks();
    for (i, job) in earlier.iter().enumerate() {
        families::replay_with(job.arch, job.workload, &later_job, replay, options)?;
        let (arch_after, workload_after) = earlier
            .get(i + 1)
            .map_or((next_arch, next_workload), |j| (j.arch, j.workload));
        if job.arch == arch_after {
            replay.start_next_job(&KEPT_BETWEEN_JOBS);
            if families::nn::param_dtype(job.workload) != families::nn::param_dtype(workload_after)
            {
                replay.cast_kept_weights();
            }
        } else {
            replay.start_next_job(&[Component::LibraryWorkspace]);
        }
    }
    Ok(())
}

fn run(
    replay: &mut Replay,
    arch: &Architecture,
    earlier: &[EarlierJob],
    workload: &Workload,
    runtime: &RuntimeProfile,
    options: EstimateOptions,
) -> Result<Estimate, Error> {
    workload.validate()?;
    runtime.validate()?;
    families::validate(arch, workload)?;
    // With its earlier jobs given, the process's history is theirs: it ran
    // a backward pass if one of them trained. (Earlier jobs replay only
    // with `diagnostics`; the page has none.)
    #[cfg(feature = "diagnostics")]
    let history;
    #[cfg(feature = "diagnostics")]
    let runtime = if earlier.is_empty() {
        runtime
    } else {
        history = RuntimeProfile {
            process_ran_backward: earlier
                .iter()
                .any(|job| job.workload.mode == crate::workload::Mode::Training),
            ..runtime.clone()
        };
        &history
    };
    #[cfg(not(feature = "diagnostics"))]
    let _ = earlier;
    #[allow(unused_mut)]
    let mut libraries_guess = families::libraries(arch, workload, runtime);
    #[cfg(feature = "diagnostics")]
    for job in earlier {
        // Libraries loaded by the earlier jobs stay loaded.
        let before = families::libraries(job.arch, job.workload, runtime);
        libraries_guess.cublas |= before.cublas;
        libraries_guess.backward |= before.backward;
        libraries_guess.cudnn |= before.cudnn;
    }
    let outside = outside_allocator(runtime, libraries_guess);
    let capacity = match (
        options.capacity.map(|c| c.saturating_sub(outside)),
        options.allocator_limit,
    ) {
        (Some(device), Some(limit)) => Some(device.min(limit)),
        (device, limit) => device.or(limit),
    };
    replay.reset(runtime.allocator, capacity);
    #[cfg(feature = "diagnostics")]
    if !earlier.is_empty() {
        replay_earlier_jobs(earlier, arch, workload, runtime, options.replay, replay)?;
    }
    let summary = families::replay_with(arch, workload, runtime, replay, options.replay)?;
    #[cfg(not(feature = "diagnostics"))]
    debug_assert!(summary.libraries == libraries_guess);
    #[cfg(feature = "diagnostics")]
    debug_assert!(!earlier.is_empty() || summary.libraries == libraries_guess);
    let stats = replay.stats();
    let peak = replay.peak();

    let mut breakdown = Vec::with_capacity(Component::ALL.len());
    let lib_bytes = outside - runtime.cuda_context_bytes;
    breakdown.push(Share {
        component: Component::CudaContext,
        bytes: Bytes(runtime.cuda_context_bytes),
    });
    breakdown.push(Share {
        component: Component::Libraries,
        bytes: Bytes(lib_bytes),
    });
    // Paged optimizer state (CUDA unified memory) is on the device beside
    // the allocator's segments from the first step on; the driver counts
    // it, and it pages out to the host rather than run out of memory.
    let managed = device_bytes_of_managed(replay.managed());
    for c in Component::ALL {
        if (c as usize) < Component::IN_ALLOCATOR {
            let index = Component::INDEXED.iter().position(|&x| x == c).unwrap_or(0);
            let paged = if c == Component::OptimizerState {
                managed
            } else {
                0
            };
            breakdown.push(Share {
                component: c,
                bytes: Bytes(peak.live[index] + paged),
            });
        }
    }
    // The reserved peak is never below the allocated one.
    breakdown.push(Share {
        component: Component::AllocatorSlack,
        bytes: Bytes(stats.peak_reserved - peak.allocated),
    });

    Ok(Estimate {
        driver_peak: Bytes(outside + stats.peak_reserved + managed),
        reserved_peak: Bytes(stats.peak_reserved),
        allocated_peak: Bytes(stats.peak_allocated),
        outside_allocator: Bytes(outside),
        breakdown,
        peak_op: describe(peak.op),
        params: summary.params,
        weight_bytes: Bytes(summary.weight_bytes),
        fits: replay.out_of_memory().is_none(),
        reached_capacity: stats.cache_flushes > 0,
    })
}

/// What the driver shows on the device for CUDA unified memory holding
/// `managed` bytes: at least [`UNIFIED_MEMORY_DEVICE_BYTES`] once any is
/// allocated.
fn device_bytes_of_managed(managed: u64) -> u64 {
    if managed == 0 {
        0
    } else {
        managed.max(UNIFIED_MEMORY_DEVICE_BYTES)
    }
}

/// The device memory NVML counts once a process holds any CUDA unified
/// memory: 128 MiB, whatever the paged state (12.6 MB to 44 MB in three
/// QLoRA jobs with paged 8-bit AdamW, each 134,217,728 B above the same
/// job's non-paged outside-allocator bytes; 112 MiB with 50 MB of paged
/// 32-bit state in a plain loop), measured on the H100
/// (`measurements/qlora/h100-2026-12-07/`). Larger paged states were not
/// measured; they count at their size.
pub const UNIFIED_MEMORY_DEVICE_BYTES: u64 = 128 << 20;

fn describe(op: Op) -> String {
    let mut s = String::new();
    if let Some(step) = op.step {
        let kind = if op.step_kind.is_empty() {
            "step"
        } else {
            op.step_kind
        };
        s.push_str(&format!("{kind} {}: ", step + 1));
    }
    if let Some(layer) = op.layer {
        s.push_str(&format!("layer {}: ", layer));
    }
    s.push_str(if op.name.is_empty() { "load" } else { op.name });
    s
}

/// Tensors live at the peak, grouped by the op that allocated them.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LiveGroup {
    /// The allocating op (with layer and step).
    pub op: String,
    /// Component the tensors count under.
    pub component: Component,
    /// Blocks.
    pub count: u64,
    /// Bytes (block sizes).
    pub bytes: Bytes,
}

#[cfg(feature = "diagnostics")]
/// What is live at the peak moment, largest groups first: replays twice,
/// the second time stopping at the peak to list the live blocks.
pub fn live_at_peak(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
) -> Result<Vec<LiveGroup>, Error> {
    workload.validate()?;
    runtime.validate()?;
    families::validate(arch, workload)?;
    let mut first = Replay::new(runtime.allocator, None);
    families::replay(arch, workload, runtime, &mut first)?;
    let mut second = Replay::new(runtime.allocator, None);
    second.inspect_at(first.peak_allocation());
    families::replay(arch, workload, runtime, &mut second)?;
    let mut groups: Vec<LiveGroup> = Vec::new();
    for &(op, component, bytes) in second.inspected() {
        let name = describe(op);
        match groups
            .iter_mut()
            .find(|g| g.op == name && g.component == component)
        {
            Some(g) => {
                g.count += 1;
                g.bytes += Bytes(bytes);
            }
            None => groups.push(LiveGroup {
                op: name,
                component,
                count: 1,
                bytes: Bytes(bytes),
            }),
        }
    }
    groups.sort_by_key(|g| core::cmp::Reverse(g.bytes));
    Ok(groups)
}
