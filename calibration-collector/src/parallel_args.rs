//! The several-GPU flags of `estimate` and `gpus` (`--strategy`,
//! `--world-size`, `--no-reshard-after-forward`): they override the spec's
//! `workload.parallel`, and a bad value is refused naming the flag and what
//! it allows.

use crate::error::{CollectorError, Result};
use headroom_core::arch::Architecture;
use headroom_core::families;
use headroom_core::parallel::{Strategy, MAX_WORLD_SIZE};
use headroom_core::readers::Spec;
use headroom_core::runtime::{outside_allocator, LibraryUse};
use headroom_core::workload::Workload;
use headroom_core::RuntimeProfile;

/// Flags that spread the job over several GPUs (override `workload.parallel`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ParallelArgs {
    /// How the job is spread over its GPUs: none, ddp, fsdp2, zero1 (training) or tp
    /// (inference); overrides `workload.parallel.strategy`. `batch` is per rank.
    #[arg(long, value_name = "KEY")]
    pub strategy: Option<String>,
    /// GPUs (ranks) in the job; overrides `workload.parallel.world_size`.
    #[arg(long, value_name = "N")]
    pub world_size: Option<String>,
    /// FSDP2: keep each layer's gathered parameters from forward to backward
    /// (`reshard_after_forward=False`).
    #[arg(long)]
    pub no_reshard_after_forward: bool,
}

impl ParallelArgs {
    /// True when no flag is given.
    pub fn is_empty(&self) -> bool {
        self.strategy.is_none() && self.world_size.is_none() && !self.no_reshard_after_forward
    }
}

/// `--strategy KEY` as a strategy.
pub fn parse_strategy(key: &str) -> Result<Strategy> {
    Strategy::from_key(key).ok_or_else(|| {
        CollectorError::input(format!(
            "--strategy: unknown strategy `{}` (workload.parallel.strategy); allowed: {}",
            key.chars().take(40).collect::<String>(),
            headroom_core::keys::one_of(Strategy::KEYS)
        ))
    })
}

/// `--world-size N` as a number of GPUs.
pub fn parse_world_size(text: &str) -> Result<u32> {
    let n: u64 = text.trim().parse().map_err(|_| {
        CollectorError::input(format!(
            "--world-size: `{}` is not a whole number (workload.parallel.world_size); allowed: 1 to {MAX_WORLD_SIZE}",
            text.chars().take(40).collect::<String>()
        ))
    })?;
    if n == 0 || n > MAX_WORLD_SIZE {
        return Err(CollectorError::input(format!(
            "--world-size: {n} is out of range (workload.parallel.world_size); allowed: 1 to {MAX_WORLD_SIZE}"
        )));
    }
    Ok(n as u32)
}

/// A count flag (`--world-size`, `--nproc`): a whole number from 1 to `max`.
pub fn parse_count(flag: &str, text: &str, max: u64) -> Result<u32> {
    match text.trim().parse::<u64>() {
        Ok(n) if n >= 1 && n <= max => Ok(n as u32),
        Ok(n) => Err(CollectorError::input(format!(
            "{flag}: {n} is out of range; allowed: 1 to {max}"
        ))),
        Err(_) => Err(CollectorError::input(format!(
            "{flag}: `{}` is not a whole number; allowed: 1 to {max}",
            text.chars().take(40).collect::<String>()
        ))),
    }
}

/// Applies the flags to `spec.workload.parallel` and checks the result;
/// errors name the flag and the field.
pub fn apply(args: &ParallelArgs, spec: &mut Spec) -> Result<()> {
    if args.is_empty() {
        return Ok(());
    }
    let p = &mut spec.workload.parallel;
    if let Some(key) = &args.strategy {
        p.strategy = parse_strategy(key)?;
        // `--strategy none` alone means one GPU.
        if p.strategy == Strategy::None && args.world_size.is_none() {
            p.world_size = 1;
        }
    }
    if let Some(n) = &args.world_size {
        p.world_size = parse_world_size(n)?;
    }
    if args.no_reshard_after_forward {
        if p.strategy != Strategy::Fsdp2 {
            return Err(CollectorError::input(format!(
                "--no-reshard-after-forward: applies to FSDP2 only (workload.parallel.reshard_after_forward), but the strategy is `{}`; allowed: with --strategy fsdp2",
                p.strategy.key()
            )));
        }
        p.reshard_after_forward = false;
    }
    let training = spec.workload.mode == headroom_core::workload::Mode::Training;
    spec.workload
        .parallel
        .validate(training)
        .map_err(|e| CollectorError::input(format!("--strategy/--world-size: {e}")))
}

/// "per rank of N GPUs (strategy)", or `None` for a single-GPU job.
pub fn per_rank(workload: &Workload) -> Option<String> {
    let p = &workload.parallel;
    if p.is_single() {
        return None;
    }
    let mut how = p.strategy.key().to_string();
    if p.strategy == Strategy::Fsdp2 && !p.reshard_after_forward {
        how.push_str(", no reshard after forward");
    }
    Some(format!(
        "per rank of {} GPU{} ({how})",
        p.world_size,
        if p.world_size == 1 { "" } else { "s" }
    ))
}

/// NCCL's bytes in one rank's outside-allocator sum (its communicator and
/// peer buffers), as the core counts them; 0 for a single-GPU job.
pub fn nccl_bytes(arch: &Architecture, workload: &Workload, runtime: &RuntimeProfile) -> u64 {
    let libs = families::libraries(arch, workload, runtime);
    if libs.nccl_ranks == 0 {
        return 0;
    }
    let without = LibraryUse {
        nccl_ranks: 0,
        ..libs
    };
    outside_allocator(runtime, libs).saturating_sub(outside_allocator(runtime, without))
}
