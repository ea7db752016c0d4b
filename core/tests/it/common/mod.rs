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
    let spec = headroom_core::readers::Spec::from_json(json).unwrap();
    named_events_of(&spec.model.arch, &spec.workload, &spec.runtime, MIB + 1)
        .into_iter()
        .filter(|(_, _, name)| !name.contains("load weights"))
        .map(|(alloc, size, _)| (alloc, size))
        .collect()
}

/// A measured trace's events from `tests/fixtures/traces/NAME.txt`, in
/// order: (allocation, size). The file opens with a `#` line saying what
/// was measured, and where; then one event a line, `+SIZE` an allocation
/// and `-SIZE` a free (`+73.50`, `-24`). Panics naming the file and the
/// line on anything else.
#[allow(dead_code)]
pub fn trace<T>(name: &str) -> Vec<(bool, T)>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    let path = format!(
        "{}/tests/fixtures/traces/{name}.txt",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, first)) if first.starts_with('#') => {}
        _ => panic!("{path}:1: the first line is not a `#` comment saying what was measured"),
    }
    lines
        .filter(|(_, line)| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|(i, line)| {
            let line = line.trim();
            let alloc = match line.as_bytes()[0] {
                b'+' => true,
                b'-' => false,
                _ => panic!("{path}:{}: `{line}` is not `+SIZE` or `-SIZE`", i + 1),
            };
            let digits = &line[1..];
            if !digits.starts_with(|c: char| c.is_ascii_digit()) {
                panic!("{path}:{}: `{line}` is not `+SIZE` or `-SIZE`", i + 1);
            }
            let size = digits
                .parse()
                .unwrap_or_else(|e| panic!("{path}:{}: `{line}`: {e}", i + 1));
            (alloc, size)
        })
        .collect()
}
