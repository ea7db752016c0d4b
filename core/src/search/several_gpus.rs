//! The fewest cards a job needs with each strategy: one rank's peak at
//! each GPU count tried.

use crate::arch::Architecture;
use crate::error::Error;
use crate::estimate::{estimate_with, EstimateOptions};
use crate::parallel::Strategy;
use crate::runtime::RuntimeProfile;
use crate::workload::Workload;
use alloc::string::String;
use alloc::vec::Vec;

/// GPU counts the fewest-cards search tries: the sizes within one node
/// (1, 2, 4, 8), then whole 8-GPU nodes.
pub const GPU_COUNTS: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The strategies that can spread `workload` over several cards: DDP,
/// ZeRO-1 and FSDP2 for decoder training (FSDP2 without LoRA, as it is
/// modelled; mixed precision as [`on_gpus`] applies it), tensor
/// parallelism for decoder inference; none for other models.
pub fn strategies_for(arch: &Architecture, workload: &Workload) -> Vec<Strategy> {
    use crate::workload::Mode;
    if !matches!(arch, Architecture::Decoder(_)) {
        return Vec::new();
    }
    match workload.mode {
        Mode::Training => {
            let mut all = alloc::vec![Strategy::Ddp, Strategy::Zero1];
            if workload.training.lora.is_none() {
                all.push(Strategy::Fsdp2);
            }
            all
        }
        Mode::Inference => alloc::vec![Strategy::Tp],
    }
}

/// Why `strategy` does not apply to this model and workload (tensor
/// parallelism is modelled for Llama-style decoders only), or `None` when
/// it does. A strategy that does not apply is a column without an answer,
/// never an error: the job on one card is still answered.
pub fn strategy_unavailable(
    arch: &Architecture,
    workload: &Workload,
    strategy: Strategy,
) -> Option<String> {
    match crate::families::validate(arch, &on_gpus(workload, strategy, 2)) {
        Err(Error::InvalidField { field, problem, .. }) if field == STRATEGY_FIELD => Some(problem),
        _ => None,
    }
}

/// The field whose error means "this strategy does not apply to the model".
const STRATEGY_FIELD: &str = "workload.parallel.strategy";

/// Whether an error of one rank's estimate means that GPU count (or the
/// strategy itself) has no answer for this model rather than a bad input:
/// a count that does not divide the heads, or a strategy that does not
/// apply ([`strategy_unavailable`]).
pub fn no_answer_at_count(error: &Error) -> bool {
    matches!(
        error.field(),
        Some("workload.parallel.world_size") | Some(STRATEGY_FIELD)
    )
}

/// The workload on `count` GPUs with `strategy` (`batch` per rank); one
/// GPU runs the job as given, without a strategy. Mixed precision under
/// FSDP2 is FSDP2's own ([`fsdp2_mixed_precision`]).
pub fn on_gpus(workload: &Workload, strategy: Strategy, count: u32) -> Workload {
    let mut w = workload.clone();
    w.parallel.strategy = if count == 1 { Strategy::None } else { strategy };
    w.parallel.world_size = count;
    if w.parallel.strategy == Strategy::Fsdp2 {
        fsdp2_mixed_precision(&mut w);
    }
    w
}

/// A job written with autocast (`amp_bf16`, `amp_fp16`) as FSDP2 runs it
/// under the HF `Trainer` and accelerate (accelerate 1.15
/// `fsdp2_prepare_model` and `FullyShardedDataParallelPlugin
/// .set_mixed_precision`): fp32 sharded master weights, gathered for
/// compute in the autocast dtype (`MixedPrecisionPolicy(param_dtype)`),
/// gradients reduce-scattered in that dtype too (`reduce_dtype`). The
/// autocast context accelerate keeps around the forward, a no-op on
/// weights already gathered in that dtype, is not replayed.
pub fn fsdp2_mixed_precision(workload: &mut Workload) {
    use crate::workload::Precision;
    let dtype = match workload.training.precision {
        Precision::AmpBf16 => crate::arch::Dtype::Bf16,
        Precision::AmpFp16 => crate::arch::Dtype::Fp16,
        _ => return,
    };
    workload.training.precision = Precision::Fp32;
    workload.parallel.param_dtype = dtype;
    workload.parallel.reduce_dtype = dtype;
}

/// One rank's driver-level peak with `strategy` at each of [`GPU_COUNTS`],
/// ascending, stopping after the first count whose peak is at most
/// `stop_below` bytes (no card of interest needs more GPUs than that).
/// A count the strategy cannot use (tensor parallelism over a count that
/// does not divide the heads) has no peak.
pub fn rank_peaks(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    strategy: Strategy,
    stop_below: u64,
) -> Result<Vec<(u32, Option<u64>)>, Error> {
    let mut peaks = Vec::new();
    for count in GPU_COUNTS {
        let w = on_gpus(workload, strategy, count);
        let peak = match estimate_with(arch, &w, runtime, EstimateOptions::default()) {
            Ok(e) => Some(e.driver_peak.0),
            Err(e) if no_answer_at_count(&e) => None,
            Err(e) => return Err(e),
        };
        peaks.push((count, peak));
        if peak.is_some_and(|p| p <= stop_below) {
            break;
        }
    }
    Ok(peaks)
}

/// The fewest cards of a row ([`GpuFit`]) that run the job with one
/// strategy: one when the job, on one GPU as given, fits the card
/// (`fits_as_given`), whatever the strategy's wider range says of one
/// rank; else [`fewest_gpus`] of the strategy's peaks within the card's
/// [`strategy_capacity`]. One rule for the CLI's table and Python's.
pub fn fewest_cards_on_row(
    fits_as_given: bool,
    workload: &Workload,
    peaks: &[(u32, Option<u64>)],
    capacity: u64,
) -> Option<u32> {
    if fits_as_given && workload.parallel.strategy == Strategy::None {
        Some(1)
    } else {
        fewest_gpus(peaks, capacity)
    }
}

/// The fewest GPUs (from [`rank_peaks`]) whose per-rank peak fits `usable`
/// bytes, or `None` when no count tried does.
pub fn fewest_gpus(peaks: &[(u32, Option<u64>)], usable: u64) -> Option<u32> {
    peaks
        .iter()
        .find(|(_, peak)| peak.is_some_and(|p| p <= usable))
        .map(|&(count, _)| count)
}
