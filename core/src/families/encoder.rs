//! BERT and ESM-2 encoders.
use crate::arch::EncoderArch;
use crate::error::Error;
use crate::estimate::ReplaySummary;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;

/// Rejects workloads the encoder family cannot run.
pub fn validate(_workload: &Workload) -> Result<(), Error> {
    Ok(())
}

/// Replays an encoder run.
pub fn replay(
    arch: &EncoderArch,
    _workload: &Workload,
    _runtime: &RuntimeProfile,
    _replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    Err(Error::unsupported(alloc::format!("encoder {:?} not modelled yet", arch.kind)))
}
