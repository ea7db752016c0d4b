//! Measured cases (the `measurements/public/` format) read as they ran:
//! what their process held when they started, the jobs it ran before
//! them ([`ProcessHistory`]), and their estimate under the harness's
//! protocol ([`estimate_as_measured`]).

use super::Spec;
use crate::arch::Architecture;
#[cfg(feature = "diagnostics")]
use crate::error::Error;
use crate::runtime::RuntimeProfile;
use crate::workload::Workload;
use alloc::string::{String, ToString};
use serde_json::{Map, Value};

/// A measured case's `weight_bytes` and `measured.resident_before`: what its
/// process held when the case started, against the model's own weights.
fn weights_and_resident(obj: &Map<String, Value>) -> Option<(u64, u64)> {
    let weights = obj.get("weight_bytes").and_then(Value::as_u64)?;
    let resident = obj
        .get("measured")
        .and_then(|m| m.get("resident_before"))
        .and_then(Value::as_u64)?;
    Some((weights, resident))
}

#[cfg(feature = "diagnostics")]
/// How a measured case ran (the harness and the public set alike): the model
/// built directly on the GPU, then every case started after
/// `empty_cache()` and `reset_peak_memory_stats()`. For ESMFold, whose
/// `__init__` builds the ESM-2 stem in fp32 and casts it, that is a
/// `build_then_cast` load (unless `case` names its `workload.load`) whose
/// cast leaves holes in the segments it shared with kept weights; other
/// models are built in their own dtype, as compact as loaded ones. Sets
/// `spec`'s load and returns the replay options to estimate it with.
///
/// A case whose peak is its whole process's (`measured.peak_window:
/// "process"`: a `run --cmd` job that reports no case time, so the
/// collector's window is the process from start to end) is replayed as
/// `estimate` replays a job: the load included, its cache kept.
fn as_measured(case: &Value, spec: &mut Spec) -> crate::families::ReplayOptions {
    let explicit = case.get("workload").and_then(|w| w.get("load")).is_some();
    if !explicit && matches!(spec.model.arch, Architecture::EsmFold(_)) {
        spec.workload.load = crate::workload::LoadPath::BuildThenCast;
    }
    let whole_process = case
        .get("measured")
        .and_then(|m| m.get("peak_window"))
        .and_then(Value::as_str)
        == Some("process");
    crate::families::ReplayOptions {
        cache_emptied_after_load: !whole_process,
        ..Default::default()
    }
}

#[cfg(feature = "diagnostics")]
/// The allocator limit a measured case ran under (`allocator_limit_bytes`:
/// `run --capacity`, `torch.cuda.set_per_process_memory_fraction`), if any.
pub fn allocator_limit_of(case: &Value) -> Result<Option<u64>, Error> {
    match case.get("allocator_limit_bytes") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(Error::invalid(
                "allocator_limit_bytes",
                "is not a positive whole number of bytes",
                "the bytes torch's allocator may reserve, from 1",
            )),
        },
    }
}

#[cfg(feature = "diagnostics")]
/// Estimates a measured case (`case`, parsed into `spec`) as it ran: loaded
/// as [`as_measured`] says, after the jobs its process ran before it
/// ([`ProcessHistory::earlier_jobs`], which also records this case for the
/// cases after it in the file). `check`, `fit` and the accuracy tests
/// predict every measured case this way.
pub fn estimate_as_measured(
    case: &Value,
    spec: &mut Spec,
    history: &mut ProcessHistory,
) -> Result<crate::estimate::Estimate, Error> {
    let options = crate::estimate::EstimateOptions {
        replay: as_measured(case, spec),
        allocator_limit: allocator_limit_of(case)?,
        ..Default::default()
    };
    let chain = history.earlier_jobs(case, spec);
    let earlier: alloc::vec::Vec<crate::estimate::EarlierJob> = chain
        .iter()
        .map(|(arch, workload)| crate::estimate::EarlierJob { arch, workload })
        .collect();
    crate::estimate::estimate_in_process(
        &earlier,
        &spec.model.arch,
        &spec.workload,
        &spec.runtime,
        options,
    )
}

/// A measured case (the `measurements/public/` format) says what its process
/// held when it started: `measured.resident_before` bytes against the
/// model's `weight_bytes`. The harness keeps one optimizer per model, so a
/// training case that starts with more than 1.5x its weights resident
/// started with the state an earlier case created (AdamW and SGD with
/// momentum keep at least one weight-sized buffer per parameter; Adafactor's
/// factored state is too small to tell and stays as given). An explicit
/// `workload.training.optimizer_state_resident` wins.
pub(super) fn infer_resident_optimizer_state(obj: &Map<String, Value>, workload: &mut Workload) {
    let explicit = obj
        .get("workload")
        .and_then(|w| w.get("training"))
        .and_then(|t| t.get("optimizer_state_resident"))
        .is_some();
    if workload.mode != crate::workload::Mode::Training || explicit {
        return;
    }
    if let Some((weights, resident)) = weights_and_resident(obj) {
        if weights > 0 && resident >= weights.saturating_add(weights / 2) {
            workload.training.optimizer_state_resident = true;
        }
    }
}

/// A measured inference case says whether its process had run a backward
/// pass: autograd's thread then holds a second cuBLAS workspace, so
/// `measured.resident_before` exceeds `weight_bytes` by two workspaces
/// (the public set's BERT, ESM-2 and ResNet-50 processes) rather than one
/// or none (its Llama generation process). Unless the runtime says
/// otherwise, `process_ran_backward` follows.
pub(super) fn infer_backward_history(
    obj: &Map<String, Value>,
    workload: &Workload,
    runtime: &mut RuntimeProfile,
) {
    let explicit = obj
        .get("runtime")
        .and_then(|r| r.get("process_ran_backward"))
        .is_some();
    if workload.mode != crate::workload::Mode::Inference || explicit {
        return;
    }
    if let Some((weights, resident)) = weights_and_resident(obj) {
        let workspace = runtime.cublas_workspace_bytes.max(1);
        let extra = resident.saturating_sub(weights);
        runtime.process_ran_backward =
            extra.saturating_add(workspace / 2) >= workspace.saturating_mul(2);
    }
}

/// The process history of a file of measured cases, read in file order.
/// The calibration harness runs all cases of one model build in one process
/// and keeps one optimizer: the first training case creates the optimizer
/// state among its freed activations, and later training cases (those
/// that start with the state resident, see `optimizer_state_resident`) find
/// it there; a training case without the state resident made a new one
/// (it ran in a process of its own). [`ProcessHistory::earlier_job`] names
/// the case that made the state, for
/// [`crate::estimate::estimate_after`]. Inference cases likewise: one that
/// starts with at least a cuBLAS workspace resident beyond its weights,
/// in a process that ran no backward, ran after the first inference case
/// of its build in the file, whose first matmul created the workspace
/// inside one of its segments; that segment stays reserved, its free part
/// the next cases' (ResNet-50 fp32 b32 at 512 px after b64 at 224 px: its
/// images land in the 196 MiB segment the earlier case's workspace keeps,
/// `measurements/inference-batches/`), and each later case leaves it as
/// it found it. Builds are told apart by `model`,
/// `weight_bytes`, the dtype and the attention kernel.
///
/// A case whose `runtime.process_builds_before` is k > 0 ran in a process
/// that had built, run and dropped the k builds before its own in the file
/// (`headroom_measure.py --batch --one-process`, a notebook's order):
/// [`ProcessHistory::earlier_jobs`] replays, before the case's own
/// history, each of those builds' first case and its first training case,
/// the jobs that create the process's cuBLAS workspaces.
#[derive(Clone, Debug, Default)]
pub struct ProcessHistory {
    first_training: alloc::vec::Vec<(String, u64, Workload)>,
    first_inference: alloc::vec::Vec<(String, u64, Workload)>,
    /// The file's builds in order, each with the jobs of it that a later
    /// build's process history replays.
    builds: alloc::vec::Vec<((String, u64), Architecture, alloc::vec::Vec<Workload>)>,
}

impl ProcessHistory {
    /// The jobs that ran before `spec` (parsed from `case`) in its process
    /// and left the state it starts with, oldest first, each with its
    /// model: the earlier builds' jobs (when `runtime.process_builds_before`
    /// says there were any), then the case's own build's earlier job
    /// ([`ProcessHistory::earlier_job`]).
    pub fn earlier_jobs(
        &mut self,
        case: &Value,
        spec: &Spec,
    ) -> alloc::vec::Vec<(Architecture, Workload)> {
        use crate::workload::Mode::Training;
        let own_build = self.earlier_job(case, spec);
        let key = (
            case.get("model").map(|m| m.to_string()).unwrap_or_default(),
            case.get("weight_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        );
        if self.builds.last().is_none_or(|(last, ..)| *last != key) {
            let arch = spec.model.arch.clone();
            self.builds.push((key, arch, alloc::vec::Vec::new()));
        }
        let builds_before = case
            .get("runtime")
            .and_then(|r| r.get("process_builds_before"))
            .and_then(Value::as_u64)
            .map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let current = self.builds.len() - 1;
        let mut chain = alloc::vec::Vec::new();
        if builds_before == 0 {
            chain.extend(own_build.map(|w| (spec.model.arch.clone(), w)));
        } else {
            // Everything the process ran: the earlier builds' jobs, then
            // this build's so far.
            for (_, arch, jobs) in &self.builds[current.saturating_sub(builds_before)..] {
                chain.extend(jobs.iter().map(|w| (arch.clone(), w.clone())));
            }
        }
        // This build's first case, and its first training case: the jobs
        // that create the process's workspaces and the optimizer state.
        let jobs = &mut self.builds[current].2;
        let training = spec.workload.mode == Training;
        if jobs.is_empty() || (training && !jobs.iter().any(|w| w.mode == Training)) {
            jobs.push(spec.workload.clone());
        }
        chain
    }

    /// The job that ran before `spec` (parsed from `case`) in its process and
    /// left the state it starts with, if any; records `spec` when it is the
    /// first training or inference job of its build.
    pub fn earlier_job(&mut self, case: &Value, spec: &Spec) -> Option<Workload> {
        let build = |case: &Value, spec: &Spec| -> Option<(String, u64)> {
            let model = case.get("model")?.to_string();
            let weights = case.get("weight_bytes").and_then(Value::as_u64)?;
            let attention = spec.workload.attention.key();
            let dtype = spec.workload.dtype.key();
            Some((alloc::format!("{model} {dtype} {attention}"), weights))
        };
        let (model, weights) = build(case, spec)?;
        if spec.workload.mode == crate::workload::Mode::Inference {
            let slot = self
                .first_inference
                .iter()
                .position(|(m, w, _)| *m == model && *w == weights);
            let earlier = slot.map(|i| self.first_inference[i].2.clone());
            if slot.is_none() {
                self.first_inference
                    .push((model, weights, spec.workload.clone()));
            }
            let resident = case
                .get("measured")
                .and_then(|m| m.get("resident_before"))
                .and_then(Value::as_u64)?;
            let workspace = spec.runtime.cublas_workspace_bytes.max(1);
            let kept_workspace = resident >= weights.saturating_add(workspace);
            return earlier.filter(|_| kept_workspace && !spec.runtime.process_ran_backward);
        }
        let slot = self
            .first_training
            .iter()
            .position(|(m, w, _)| *m == model && *w == weights);
        match slot {
            Some(i) if spec.workload.training.optimizer_state_resident => {
                Some(self.first_training[i].2.clone())
            }
            // A training case without the state resident ran in a process
            // of its own: it creates the optimizer the cases after it find.
            Some(i) => {
                self.first_training[i].2 = spec.workload.clone();
                None
            }
            None => {
                self.first_training
                    .push((model, weights, spec.workload.clone()));
                None
            }
        }
    }
}
