//! torchvision's VisionTransformer.
use crate::arch::VitArch;
use crate::error::Error;
use crate::estimate::ReplaySummary;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;

/// Rejects workloads vision models cannot run.
pub fn validate_vision(_workload: &Workload) -> Result<(), Error> {
    Ok(())
}

/// Replays a ViT run.
pub fn replay(
    _arch: &VitArch,
    _workload: &Workload,
    _runtime: &RuntimeProfile,
    _replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    Err(Error::unsupported("vit not modelled yet"))
}
