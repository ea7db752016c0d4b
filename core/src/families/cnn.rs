//! Convolutional networks (torchvision ResNet, MobileNetV2).
use crate::arch::CnnArch;
use crate::error::Error;
use crate::estimate::ReplaySummary;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;

/// Parameter count.
pub fn params(_arch: &CnnArch) -> u64 {
    0
}

/// Replays a CNN run.
pub fn replay(
    _arch: &CnnArch,
    _workload: &Workload,
    _runtime: &RuntimeProfile,
    _replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    Err(Error::unsupported("cnn not modelled yet"))
}
