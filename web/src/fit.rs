//! Which GPUs fit: for each catalog GPU, the largest length and batch that
//! run, how many such jobs share one card, and the reservation to request.
//!
//! The searches are the core's (`search::LargestSearch` probing
//! `search::fits_at`, as `search::max_length` and `search::max_batch` do),
//! run one estimate at a time so the page can hand control back between
//! them; the only arithmetic here applies the user's fragmentation margin,
//! which is a scheduling policy, not a model of memory.

use headroom_core::arch::Architecture;
use headroom_core::gpus::{Gpu, CATALOG};
use headroom_core::search::{fits_at, Axis, LargestSearch};
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

/// The row of one GPU, all at once.
pub fn row(
    gpu: &'static Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<Bytes>,
    margin_pct: u32,
) -> FitRow {
    let mut search = RowSearch::new(gpu, arch, driver_peak, margin_pct);
    loop {
        if let Some(row) = search.step(arch, workload, runtime) {
            return row;
        }
    }
}

/// One GPU's row in progress: the longest length, then the largest batch,
/// searched one estimate per [`RowSearch::step`] (a generation of thousands
/// of tokens can take a tenth of a second per estimate, and a row dozens).
#[derive(Clone, Debug)]
pub struct RowSearch {
    gpu: &'static Gpu,
    capacity: u64,
    reservation: Option<Bytes>,
    length: LargestSearch,
    batch: LargestSearch,
    length_error: Option<String>,
    batch_error: Option<String>,
}

impl RowSearch {
    /// The search for `gpu`'s row.
    pub fn new(
        gpu: &'static Gpu,
        arch: &Architecture,
        driver_peak: Option<Bytes>,
        margin_pct: u32,
    ) -> RowSearch {
        RowSearch {
            gpu,
            capacity: capacity(gpu.usable_bytes, margin_pct),
            reservation: driver_peak.map(|p| reservation(p, margin_pct)),
            length: LargestSearch::new(Axis::Length.limit(arch)),
            batch: LargestSearch::new(Axis::Batch.limit(arch)),
            length_error: None,
            batch_error: None,
        }
    }

    /// Runs one estimate; the row once both searches are over.
    pub fn step(
        &mut self,
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
    ) -> Option<FitRow> {
        let (axis, search, error) = if self.length_error.is_none() && !self.length.is_done() {
            (Axis::Length, &mut self.length, &mut self.length_error)
        } else if self.batch_error.is_none() && !self.batch.is_done() {
            (Axis::Batch, &mut self.batch, &mut self.batch_error)
        } else {
            let found = |search: &LargestSearch, error: &Option<String>| match error {
                Some(e) => Err(e.clone()),
                None => Ok(search.found().map(|v| v as u32)),
            };
            return Some(FitRow {
                gpu: self.gpu,
                max_length: found(&self.length, &self.length_error),
                max_batch: found(&self.batch, &self.batch_error),
                jobs: self
                    .reservation
                    .map(|r| jobs_per_card(self.gpu.usable_bytes, r)),
                reservation: self.reservation,
            });
        };
        if let Some(value) = search.probe() {
            match fits_at(arch, workload, runtime, self.capacity, axis, value) {
                Ok(fits) => search.report(fits),
                Err(e) => *error = Some(e.to_string()),
            }
        }
        None
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

    /// The row searched one estimate at a time finds what the core's own
    /// searches find.
    #[test]
    fn stepwise_rows_match_the_cores_searches() {
        use headroom_core::search::{max_batch, max_length};
        let rt = RuntimeProfile::h200();
        for id in ["gpt2", "llama-3.2-1b", "vit-b-16", "esmfold-v1"] {
            let p = headroom_core::presets::find(id).unwrap();
            let w = crate::defaults::workload_for(&p.arch);
            for gpu in [&CATALOG[0], &CATALOG[CATALOG.len() - 1]] {
                let r = row(gpu, &p.arch, &w, &rt, None, 10);
                let cap = capacity(gpu.usable_bytes, 10);
                let expect =
                    |x: Result<Option<u32>, headroom_core::Error>| x.map_err(|e| e.to_string());
                assert_eq!(
                    r.max_length,
                    expect(max_length(&p.arch, &w, &rt, cap)),
                    "{id} {}",
                    gpu.id
                );
                assert_eq!(
                    r.max_batch,
                    expect(max_batch(&p.arch, &w, &rt, cap)),
                    "{id} {}",
                    gpu.id
                );
            }
        }
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
