//! Decoder-only LLMs (HF Llama-style modelling code).
use crate::arch::DecoderArch;
use crate::error::Error;
use crate::estimate::ReplaySummary;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;

/// Rejects workloads the decoder family cannot run.
pub fn validate(_workload: &Workload) -> Result<(), Error> {
    Ok(())
}

/// Replays a decoder run.
pub fn replay(
    _arch: &DecoderArch,
    _workload: &Workload,
    _runtime: &RuntimeProfile,
    _replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    Err(Error::unsupported("decoder not modelled yet"))
}
