//! ESMFold: ESM-2 stem, folding trunk, structure module.
use crate::arch::EsmFoldArch;
use crate::error::Error;
use crate::estimate::ReplaySummary;
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::Workload;

/// Rejects workloads ESMFold cannot run.
pub fn validate(_workload: &Workload) -> Result<(), Error> {
    Ok(())
}

/// Replays an ESMFold run.
pub fn replay(
    _arch: &EsmFoldArch,
    _workload: &Workload,
    _runtime: &RuntimeProfile,
    _replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    Err(Error::unsupported("esmfold not modelled yet"))
}
