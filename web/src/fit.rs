//! Which GPUs fit: for each catalog GPU, the largest length and batch that
//! run, how many such jobs share one card, and the reservation to request.
//!
//! The searches are the core's (`search::max_length`, `search::max_batch`);
//! the only arithmetic here applies the user's fragmentation margin, which
//! is a scheduling policy, not a model of memory.

use headroom_core::arch::Architecture;
use headroom_core::gpus::{Gpu, CATALOG};
use headroom_core::search::{max_batch, max_length};
use headroom_core::workload::Workload;
use headroom_core::{Bytes, RuntimeProfile};

/// The reservation a scheduler should request for a job whose driver-level
/// peak is `driver_peak`: the peak plus `margin_pct` percent, rounded up to
/// a whole MiB.
pub fn reservation(driver_peak: Bytes, margin_pct: u32) -> Bytes {
    Bytes(headroom_core::search::reservation(
        driver_peak.0,
        margin_pct,
    ))
}

/// Device memory a job may plan for on a card once the margin is set aside:
/// `usable / (1 + margin)`.
pub fn capacity(usable: u64, margin_pct: u32) -> u64 {
    (usable as u128 * 100 / (100 + margin_pct as u128)) as u64
}

/// How many jobs of `reservation` bytes run side by side in `usable` bytes.
pub fn jobs_per_card(usable: u64, reservation: Bytes) -> u64 {
    headroom_core::search::jobs_per_card(usable, reservation.0)
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct FitRow {
    /// The GPU.
    pub gpu: &'static Gpu,
    /// Largest length that runs within the capacity left by the margin
    /// (`Ok(None)`: not even the shortest).
    pub max_length: Result<Option<u32>, String>,
    /// Largest batch at the chosen length within that capacity.
    pub max_batch: Result<Option<u32>, String>,
    /// Jobs of this workload that run on the card at once.
    pub jobs: Option<u64>,
    /// What to request per job, margin included.
    pub reservation: Option<Bytes>,
}

/// The table for every catalog GPU. `driver_peak` is the core's estimate of
/// the workload as set (absent when the core rejected it).
pub fn rows(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<Bytes>,
    margin_pct: u32,
) -> Vec<FitRow> {
    CATALOG
        .iter()
        .map(|gpu| row(gpu, arch, workload, runtime, driver_peak, margin_pct))
        .collect()
}

/// The row of one GPU (the page computes them one at a time so it stays
/// responsive).
pub fn row(
    gpu: &'static Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<Bytes>,
    margin_pct: u32,
) -> FitRow {
    let reserve = driver_peak.map(|p| reservation(p, margin_pct));
    let cap = capacity(gpu.usable_bytes, margin_pct);
    FitRow {
        gpu,
        max_length: max_length(arch, workload, runtime, cap).map_err(|e| e.to_string()),
        max_batch: max_batch(arch, workload, runtime, cap).map_err(|e| e.to_string()),
        jobs: reserve.map(|r| jobs_per_card(gpu.usable_bytes, r)),
        reservation: reserve,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::bytes::MIB;

    #[test]
    fn reservation_adds_the_margin_and_rounds_up_to_a_mib() {
        assert_eq!(reservation(Bytes(0), 10), Bytes(0));
        assert_eq!(reservation(Bytes(1), 0), Bytes(MIB));
        assert_eq!(reservation(Bytes(10 * MIB), 10), Bytes(11 * MIB));
        assert_eq!(reservation(Bytes(10 * MIB + 1), 0), Bytes(11 * MIB));
        assert_eq!(reservation(Bytes(u64::MAX), 100), Bytes(u64::MAX));
    }

    #[test]
    fn jobs_and_capacity() {
        assert_eq!(jobs_per_card(100, Bytes(30)), 3);
        assert_eq!(jobs_per_card(100, Bytes(0)), 0);
        assert_eq!(capacity(110, 10), 100);
        assert_eq!(capacity(u64::MAX, 0), u64::MAX);
    }

    #[test]
    fn rows_cover_the_catalog_without_panicking() {
        let p = headroom_core::presets::find("gpt2").unwrap();
        let w = crate::defaults::workload_for(&p.arch);
        let r = rows(
            &p.arch,
            &w,
            &RuntimeProfile::h200(),
            Some(Bytes(20_000_000_000)),
            10,
        );
        assert_eq!(r.len(), CATALOG.len());
        assert_eq!(
            r[0].reservation,
            Some(Bytes(22_000_000_000u64.div_ceil(MIB) * MIB))
        );
        assert_eq!(
            r[0].jobs,
            Some(CATALOG[0].usable_bytes / r[0].reservation.unwrap().0)
        );
    }
}
