//! The GPU catalog: memory a process can actually use on each card.

/// A GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Gpu {
    /// Stable id for URLs, e.g. `h200`.
    pub id: &'static str,
    /// Marketing name.
    pub name: &'static str,
    /// Memory on the board, bytes (the marketing figure).
    pub total_bytes: u64,
    /// Memory a CUDA process can allocate: what `cudaMemGetInfo` reports as
    /// total minus what the driver keeps before any process starts.
    pub usable_bytes: u64,
    /// Where `usable_bytes` comes from.
    pub source: &'static str,
}

/// H200 total as NVML reports it (`shared/calibration`, runtime_overheads).
pub const H200_TOTAL_BYTES: u64 = 150_754_820_096;
/// H200 memory NVML counts as used before any process (`driver_reserved_before_process`).
pub const H200_DRIVER_RESERVED_BYTES: u64 = 644_939_776;

/// The catalog.
pub const CATALOG: &[Gpu] = &[Gpu {
    id: "h200",
    name: "NVIDIA H200 141GB",
    total_bytes: H200_TOTAL_BYTES,
    usable_bytes: H200_TOTAL_BYTES - H200_DRIVER_RESERVED_BYTES,
    source: "measured: NVML total 150,754,820,096 B minus 644,939,776 B used before any process (shared/calibration/h200-public.jsonl)",
}];

/// Finds a GPU by id.
pub fn find(id: &str) -> Option<&'static Gpu> {
    CATALOG.iter().find(|g| g.id == id)
}
