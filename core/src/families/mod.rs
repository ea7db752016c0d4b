//! One module per model family. Each emits, op by op, the tensors a real
//! PyTorch run allocates and frees, into a [`Replay`].

pub mod cnn;
pub mod decoder;
pub mod encoder;
pub mod esmfold;
pub mod nn;
pub mod optim;
pub mod vit;

use crate::arch::Architecture;
use crate::error::Error;
use crate::estimate::{LibraryUse, ReplaySummary};
use crate::runtime::RuntimeProfile;
use crate::trace::Replay;
use crate::workload::{Mode, Workload};

/// Rejects workloads a family cannot run, naming the field.
pub fn validate(arch: &Architecture, workload: &Workload) -> Result<(), Error> {
    match arch {
        Architecture::Decoder(_) => decoder::validate(workload),
        Architecture::Encoder(_) => encoder::validate(workload),
        Architecture::Vit(_) | Architecture::Cnn(_) => vit::validate_vision(workload),
        Architecture::EsmFold(_) => esmfold::validate(workload),
    }
}

/// Which libraries the run loads.
pub fn libraries(arch: &Architecture, workload: &Workload, runtime: &RuntimeProfile) -> LibraryUse {
    LibraryUse {
        cublas: true,
        backward: workload.mode == Mode::Training || runtime.process_ran_backward,
        // ViT's patch embedding is an nn.Conv2d too.
        cudnn: matches!(arch, Architecture::Cnn(_) | Architecture::Vit(_)),
    }
}

/// The cuBLAS workspaces held through the run, each allocated by a handle's
/// first matmul and kept for the life of the process: the forward thread's,
/// and the autograd thread's once any backward has run. A process that ran
/// a backward pass before (`runtime.process_ran_backward`, the default)
/// holds both from the start; a fresh one creates the forward thread's at
/// its first matmul (a decoder's rotary `inv_freq @ position_ids`,
/// ResNet-50's `fc`) and, when training, the autograd thread's at the first
/// backward matmul, after that matmul's output (the H200 traces in
/// `measurements/h200-segments/` and `measurements/h200-generalization/`).
pub fn cublas_workspaces(g: &mut crate::graph::Graph, runtime: &RuntimeProfile, training: bool) {
    use crate::estimate::Component::LibraryWorkspace;
    let bytes = runtime.cublas_workspace_bytes;
    if !runtime.process_ran_backward {
        g.defer_workspaces(bytes, if training { bytes } else { 0 });
        return;
    }
    g.at("cuBLAS workspace", None);
    // Held for the life of the process: never freed.
    let _forward = g.replay.alloc(bytes, LibraryWorkspace);
    g.at("cuBLAS workspace (autograd thread)", None);
    let _autograd = g.replay.alloc(bytes, LibraryWorkspace);
}

/// Replays the whole run (weights loaded, then the workload).
pub fn replay(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    replay: &mut Replay,
) -> Result<ReplaySummary, Error> {
    let mut summary = match arch {
        Architecture::Decoder(a) => decoder::replay(a, workload, runtime, replay),
        Architecture::Encoder(a) => encoder::replay(a, workload, runtime, replay),
        Architecture::Vit(a) => vit::replay(a, workload, runtime, replay),
        Architecture::EsmFold(a) => esmfold::replay(a, workload, runtime, replay),
        Architecture::Cnn(a) => cnn::replay(a, workload, runtime, replay),
    }?;
    summary.libraries = libraries(arch, workload, runtime);
    Ok(summary)
}
