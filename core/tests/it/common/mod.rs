//! Helpers shared by the tests that pin a replay's events to a trace.

use headroom_core::arch::Architecture;
use headroom_core::families::replay;
use headroom_core::trace::Replay;
use headroom_core::{presets, RuntimeProfile, Workload};

pub const MIB: u64 = 1 << 20;

/// The replay's allocations and frees of blocks of at least `min` bytes,
/// in order: (allocation, size in MiB).
#[allow(dead_code)]
pub fn events_in_mib(
    id: &str,
    workload: &Workload,
    runtime: &RuntimeProfile,
    min: u64,
) -> Vec<(bool, u64)> {
    named_events(id, workload, runtime, min)
        .into_iter()
        .map(|(alloc, size, _)| (alloc, size / MIB))
        .collect()
}

/// The replay's allocations and frees of blocks of at least `min` bytes,
/// in order: (allocation, size in bytes, the op's name).
#[allow(dead_code)]
pub fn named_events(
    id: &str,
    workload: &Workload,
    runtime: &RuntimeProfile,
    min: u64,
) -> Vec<(bool, u64, &'static str)> {
    named_events_of(&presets::find(id).unwrap().arch, workload, runtime, min)
}

/// [`named_events`] of an architecture (a spec's, a preset changed).
#[allow(dead_code)]
pub fn named_events_of(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    min: u64,
) -> Vec<(bool, u64, &'static str)> {
    let mut r = Replay::new(runtime.allocator, None);
    r.event_log = Some(Vec::new());
    r.event_log_min = min;
    replay(arch, workload, runtime, &mut r).unwrap();
    r.event_log
        .take()
        .unwrap()
        .into_iter()
        .map(|(alloc, size, _, op)| (alloc, size, op.name))
        .collect()
}

/// The events of a spec's replay as the alignment scripts compare them
/// with a trace: blocks above 1 MiB, the weights' loading left out;
/// (allocation, size in bytes).
#[allow(dead_code)]
pub fn spec_events_above_one_mib(json: &str) -> Vec<(bool, u64)> {
    let spec = headroom_core::spec::Spec::from_json(json).unwrap();
    named_events_of(&spec.model.arch, &spec.workload, &spec.runtime, MIB + 1)
        .into_iter()
        .filter(|(_, _, name)| !name.contains("load weights"))
        .map(|(alloc, size, _)| (alloc, size))
        .collect()
}
