//! Which GPUs fit: for each catalog GPU, the largest length and batch that
//! run, how many such jobs share one card, and the reservation to request.
//!
//! The searches are the core's (`search::LargestSearch` probing
//! `search::fits_at`, as `search::max_length` and `search::max_batch` do),
//! run one estimate at a time so the page can hand control back between
//! them. A card fits when the likely range's high end, plus the user's
//! margin, is within it: the core's `search::decision_capacity` (and
//! `strategy_capacity` for the fewest cards), as the command line decides.
//!
//! The fewest cards a job needs with each strategy the core offers
//! (`search::strategies_for`) come from one rank's peaks at 1 to 256 GPUs,
//! computed once per strategy for the whole table (`search::rank_peaks`,
//! stopping at the smallest card's capacity) and read per card with
//! `search::fewest_gpus`: [`FewestPeaks`] holds them, and
//! [`PeaksSearch`] computes them one estimate at a time.

use headroom_core::arch::Architecture;
use headroom_core::estimate::{estimate_with, EstimateOptions};
use headroom_core::gpus::{Gpu, CATALOG};
use headroom_core::parallel::Strategy;
use headroom_core::search::{
    decision_capacity, fewest_gpus, on_card, on_gpus, probe_at, rank_peaks, strategies_for,
    strategy_capacity, Axis, LargestSearch, OnCard, GPU_COUNTS,
};
use headroom_core::workload::Workload;
use headroom_core::{Bytes, RuntimeProfile};

/// The reservation a scheduler should request for a job whose driver-level
/// peak is `driver_peak`: the likely range's high end plus `margin_pct`
/// percent, rounded up to a whole MiB (`search::range_reservation`).
pub fn reservation(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<Bytes>,
    margin_pct: u32,
) -> Option<Bytes> {
    driver_peak.map(|p| {
        Bytes(headroom_core::search::range_reservation(
            arch, workload, runtime, p.0, margin_pct,
        ))
    })
}

/// How many jobs of `reservation` bytes run side by side in `usable` bytes.
pub fn jobs_per_card(usable: u64, reservation: Bytes) -> u64 {
    headroom_core::search::jobs_per_card(usable, reservation.0)
}

/// A row's jobs and reservation, one rule with the CLI (`search::OnCard`):
/// no jobs when the job does not fit, else at least one; a job that fits
/// only by PyTorch freeing its cache at the card's end reserves the whole
/// card.
pub fn jobs(
    gpu: &Gpu,
    on_card: Option<OnCard>,
    reservation: Option<Bytes>,
) -> (Option<u64>, Option<Bytes>) {
    let (Some(on_card), Some(reservation)) = (on_card, reservation) else {
        return (None, reservation);
    };
    let reservation = on_card.reservation(gpu.usable_bytes, reservation.0);
    (
        Some(on_card.jobs(gpu.usable_bytes, reservation)),
        Some(Bytes(reservation)),
    )
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
    /// Whether the job as given fits (`search::fits` within the capacity
    /// the likely range and the margin leave; `None`: the core refused it).
    pub fits: Option<bool>,
    /// Where it fits only by PyTorch freeing its cache at the card's end,
    /// the driver-level peak the replay reaches on the card
    /// (`search::OnCard::releasing_cache_at`).
    pub releasing_cache_at: Option<u64>,
    /// Jobs of this workload that run on the card at once
    /// (`search::jobs_on_card`: at least one when it fits).
    pub jobs: Option<u64>,
    /// What to request per job, margin included.
    pub reservation: Option<Bytes>,
    /// The fewest cards that run the job with each strategy, within the
    /// capacity the margin leaves (`Ok(None)`: not up to 256).
    pub fewest: Vec<(Strategy, Result<Option<u32>, String>)>,
}

impl FitRow {
    /// A one-GPU job (`single`) that fits the card needs one of it,
    /// whatever a strategy's wider range says of one rank: its strategies'
    /// fewest cards read 1.
    #[inline(never)]
    pub fn one_card_when_alone(&mut self, single: bool) {
        if single && self.jobs.is_some_and(|j| j > 0) {
            for (_, n) in &mut self.fewest {
                if let Ok(n) = n {
                    *n = Some(1);
                }
            }
        }
    }
}

/// One rank's driver-level peak at each GPU count, per strategy
/// (`search::rank_peaks`), or the core's message.
pub type FewestPeaks = Vec<(Strategy, Result<Vec<(u32, Option<u64>)>, String>)>;

/// Where the peaks of [`FewestPeaks`] stop: the smallest capacity any
/// catalog card leaves one rank with any strategy (no card needs more GPUs).
pub fn stop_below(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_pct: u32,
) -> u64 {
    strategies_for(arch, workload)
        .into_iter()
        .flat_map(|s| {
            CATALOG
                .iter()
                .map(move |g| strategy_capacity(g, arch, workload, runtime, s, margin_pct))
        })
        .min()
        .unwrap_or(0)
}

/// The peaks of every strategy the core offers for the job, all at once.
pub fn fewest_peaks(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_pct: u32,
) -> FewestPeaks {
    strategies_for(arch, workload)
        .into_iter()
        .map(|strategy| {
            let stop = stop_below(arch, workload, runtime, margin_pct);
            let peaks =
                rank_peaks(arch, workload, runtime, strategy, stop).map_err(|e| e.to_string());
            (strategy, peaks)
        })
        .collect()
}

/// The fewest cards per strategy, from the table's peaks, within what
/// `capacity(strategy)` gives one rank of a card.
pub fn fewest_for(
    peaks: &FewestPeaks,
    capacity: impl Fn(Strategy) -> u64,
) -> Vec<(Strategy, Result<Option<u32>, String>)> {
    peaks
        .iter()
        .map(|(strategy, peaks)| {
            let answer = peaks
                .as_ref()
                .map(|p| fewest_gpus(p, capacity(*strategy)))
                .map_err(Clone::clone);
            (*strategy, answer)
        })
        .collect()
}

/// [`fewest_for`] on `gpu` within the likely range's high end plus the
/// margin ([`strategy_capacity`]).
pub fn fewest_on(
    peaks: &FewestPeaks,
    gpu: &Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    margin_pct: u32,
) -> Vec<(Strategy, Result<Option<u32>, String>)> {
    fewest_for(peaks, |s| {
        strategy_capacity(gpu, arch, workload, runtime, s, margin_pct)
    })
}

/// [`fewest_peaks`] one estimate per [`PeaksSearch::step`]: the same
/// walk as `search::rank_peaks`, strategy after strategy (a test checks
/// they agree).
#[derive(Clone, Debug)]
pub struct PeaksSearch {
    strategies: Vec<Strategy>,
    stop_below: u64,
    done: FewestPeaks,
    current: Vec<(u32, Option<u64>)>,
}

impl PeaksSearch {
    /// The search for the job's strategies.
    pub fn new(
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
        margin_pct: u32,
    ) -> PeaksSearch {
        PeaksSearch {
            strategies: strategies_for(arch, workload),
            stop_below: stop_below(arch, workload, runtime, margin_pct),
            done: Vec::new(),
            current: Vec::new(),
        }
    }

    /// Runs one estimate; the peaks once every strategy's are in.
    pub fn step(
        &mut self,
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
    ) -> Option<FewestPeaks> {
        let Some(&strategy) = self.strategies.get(self.done.len()) else {
            return Some(std::mem::take(&mut self.done));
        };
        let count = GPU_COUNTS[self.current.len()];
        let w = on_gpus(workload, strategy, count);
        let peak = match estimate_with(arch, &w, runtime, EstimateOptions::default()) {
            Ok(e) => Some(e.driver_peak.0),
            Err(e) if headroom_core::search::no_answer_at_count(&e) => None,
            Err(e) => {
                self.current.clear();
                self.done.push((strategy, Err(e.to_string())));
                return None;
            }
        };
        self.current.push((count, peak));
        if peak.is_some_and(|p| p <= self.stop_below) || self.current.len() == GPU_COUNTS.len() {
            let peaks = std::mem::take(&mut self.current);
            self.done.push((strategy, Ok(peaks)));
        }
        None
    }
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
    let peaks = fewest_peaks(arch, workload, runtime, margin_pct);
    CATALOG
        .iter()
        .map(|gpu| {
            let mut r = row(gpu, arch, workload, runtime, driver_peak, margin_pct);
            r.fewest = fewest_on(&peaks, gpu, arch, workload, runtime, margin_pct);
            r.one_card_when_alone(workload.parallel.is_single());
            r
        })
        .collect()
}

/// The row of one GPU, all at once (without the fewest cards, which come
/// from the whole table's peaks).
pub fn row(
    gpu: &'static Gpu,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    driver_peak: Option<Bytes>,
    margin_pct: u32,
) -> FitRow {
    let mut search = RowSearch::new(gpu, arch, workload, runtime, driver_peak, margin_pct);
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
    /// The job as given on the card (`search::on_card` within the
    /// capacity), once estimated: the first step.
    on_card: Option<Result<OnCard, String>>,
}

impl RowSearch {
    /// The search for `gpu`'s row.
    pub fn new(
        gpu: &'static Gpu,
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
        driver_peak: Option<Bytes>,
        margin_pct: u32,
    ) -> RowSearch {
        RowSearch {
            gpu,
            capacity: decision_capacity(gpu, arch, workload, runtime, margin_pct),
            reservation: reservation(arch, workload, runtime, driver_peak, margin_pct),
            length: LargestSearch::new(Axis::Length.limit(arch)),
            batch: LargestSearch::new(Axis::Batch.limit(arch)),
            length_error: None,
            batch_error: None,
            on_card: None,
        }
    }

    /// Runs one estimate; the row once both searches are over.
    pub fn step(
        &mut self,
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
    ) -> Option<FitRow> {
        if self.on_card.is_none() {
            let found = on_card(arch, workload, runtime, self.capacity);
            self.on_card = Some(found.map_err(|e| e.to_string()));
            return None;
        }
        let (axis, search, error) = if self.length_error.is_none() && !self.length.is_done() {
            (Axis::Length, &mut self.length, &mut self.length_error)
        } else if self.batch_error.is_none() && !self.batch.is_done() {
            (Axis::Batch, &mut self.batch, &mut self.batch_error)
        } else {
            let found = |search: &LargestSearch, error: &Option<String>| match error {
                Some(e) => Err(e.clone()),
                None => Ok(search.found().map(|v| v as u32)),
            };
            let on_card = self.on_card.clone().and_then(Result::ok);
            let (jobs, reservation) = jobs(self.gpu, on_card, self.reservation);
            return Some(FitRow {
                gpu: self.gpu,
                fits: on_card.map(|o| o.fits),
                releasing_cache_at: on_card.and_then(|o| o.releasing_cache_at),
                max_length: found(&self.length, &self.length_error),
                max_batch: found(&self.batch, &self.batch_error),
                jobs,
                reservation,
                fewest: Vec::new(),
            });
        };
        if let Some(value) = search.probe() {
            match probe_at(arch, workload, runtime, self.capacity, axis, value) {
                Ok(outcome) => search.report(outcome),
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
    fn reservation_is_the_likely_range_s_high_end_plus_the_margin() {
        let p = headroom_core::presets::find("gpt2").unwrap();
        let w = crate::defaults::workload_for(&p.arch);
        let rt = RuntimeProfile::h200();
        assert_eq!(reservation(&p.arch, &w, &rt, None, 10), None);
        let plain = reservation(&p.arch, &w, &rt, Some(Bytes(10_000 * MIB)), 0).unwrap();
        assert!(plain > Bytes(10_000 * MIB), "{plain}");
        assert_eq!(plain.0 % MIB, 0);
        let with_margin = reservation(&p.arch, &w, &rt, Some(Bytes(10_000 * MIB)), 10).unwrap();
        assert!(
            with_margin.0 >= plain.0 + plain.0 / 10 - MIB,
            "{with_margin} {plain}"
        );
    }

    #[test]
    fn jobs_and_capacity() {
        assert_eq!(jobs_per_card(100, Bytes(30)), 3);
        assert_eq!(jobs_per_card(100, Bytes(0)), 0);
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
                let cap = decision_capacity(gpu, &p.arch, &w, &rt, 10);
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
        // The likely range's high end plus the 10% margin, as the core
        // computes it.
        assert_eq!(
            r[0].reservation,
            Some(Bytes(headroom_core::search::range_reservation(
                &p.arch,
                &w,
                &RuntimeProfile::h200(),
                20_000_000_000,
                10
            )))
        );
        assert!(r[0].reservation > Some(Bytes(22_000_000_000)));
        // The job (much smaller than the 20 GB given) fits every card, so
        // every card runs at least one, however large the reservation.
        for row in &r {
            assert_eq!(
                row.jobs,
                Some((row.gpu.usable_bytes / row.reservation.unwrap().0).max(1)),
                "{}",
                row.gpu.id
            );
        }
    }

    /// One rule with the CLI's `gpus`: a job that fits a card only because
    /// PyTorch frees its cache and retries (ResNet-18 at batch 704 on the
    /// RTX 3060: a reservation above the card) is one job there.
    #[test]
    fn a_job_that_fits_only_by_freeing_the_cache_is_one_job() {
        let p = headroom_core::presets::find("resnet-18").unwrap();
        let mut w = crate::defaults::workload_for(&p.arch);
        w.mode = headroom_core::workload::Mode::Training;
        w.batch = 704;
        w.image_size = Some(224);
        w.training.optimizer = headroom_core::workload::Optimizer::SgdMomentum;
        w.training.steps = 3;
        let rt = RuntimeProfile::h200();
        let peak = headroom_core::estimate(&p.arch, &w, &rt)
            .unwrap()
            .driver_peak;
        let gpu = headroom_core::gpus::find("rtx-3060-12gb").unwrap();
        let r = row(gpu, &p.arch, &w, &rt, Some(peak), 0);
        let unlimited = reservation(&p.arch, &w, &rt, Some(peak), 0).unwrap();
        assert!(unlimited.0 > gpu.usable_bytes, "{r:?}");
        assert_eq!(r.fits, Some(true));
        assert_eq!(r.jobs, Some(1));
        // It reserves the card's figure, not the unlimited one, and says
        // where the replay peaks on the card.
        assert_eq!(r.reservation, Some(Bytes(gpu.usable_bytes)));
        let on_card = r.releasing_cache_at.expect("it fits by freeing the cache");
        assert!(on_card < gpu.usable_bytes && on_card < peak.0, "{r:?}");
    }

    fn training(
        id: &str,
        precision: headroom_core::workload::Precision,
    ) -> (Architecture, Workload) {
        let p = headroom_core::presets::find(id).unwrap();
        let mut w = crate::defaults::workload_for(&p.arch);
        w.mode = headroom_core::workload::Mode::Training;
        w.training.precision = precision;
        (p.arch, w)
    }

    fn peaks_stepwise(
        arch: &Architecture,
        w: &Workload,
        rt: &RuntimeProfile,
        margin: u32,
    ) -> FewestPeaks {
        let mut search = PeaksSearch::new(arch, w, rt, margin);
        let mut steps = 0;
        loop {
            if let Some(peaks) = search.step(arch, w, rt) {
                assert!(steps <= 1 + GPU_COUNTS.len() * 3, "{steps} steps");
                return peaks;
            }
            steps += 1;
        }
    }

    /// The peaks searched one estimate at a time are the core's
    /// `rank_peaks` per strategy: training (DDP, ZeRO-1, FSDP2; FSDP2 left
    /// out under autocast), tensor-parallel inference (counts that do not
    /// divide the heads have no peak), a model tensor parallelism does not
    /// take (no peak above one GPU), a model no strategy takes (none).
    #[test]
    fn stepwise_peaks_are_the_cores_rank_peaks() {
        use headroom_core::workload::Precision;
        let rt = RuntimeProfile::h200();
        let mut cases = vec![
            training("llama-3.2-1b", Precision::Bf16),
            training("llama-3.2-1b", Precision::AmpBf16),
        ];
        for (id, batch) in [
            ("llama-3.1-8b", 1),
            ("gpt2", 1),
            ("bert-base-uncased", 32),
            ("llama-3.1-70b", 1),
            ("gpt2", 512),
        ] {
            let p = headroom_core::presets::find(id).unwrap();
            let mut w = crate::defaults::workload_for(&p.arch);
            w.batch = batch;
            cases.push((p.arch.clone(), w));
        }
        let mut seen_err = false;
        let mut seen_none = false;
        for (arch, w) in &cases {
            for margin in [0, 10] {
                let expect: FewestPeaks = strategies_for(arch, w)
                    .into_iter()
                    .map(|s| {
                        (
                            s,
                            rank_peaks(arch, w, &rt, s, stop_below(arch, w, &rt, margin))
                                .map_err(|e| e.to_string()),
                        )
                    })
                    .collect();
                assert_eq!(fewest_peaks(arch, w, &rt, margin), expect);
                let stepped = peaks_stepwise(arch, w, &rt, margin);
                assert_eq!(stepped, expect);
                seen_err |= stepped.iter().any(|(_, p)| p.is_err());
                seen_none |= stepped
                    .iter()
                    .any(|(_, p)| p.as_ref().is_ok_and(|p| p.iter().any(|(_, v)| v.is_none())));
            }
        }
        // No error: a strategy the model does not take has no peak above
        // one GPU (GPT-2 under tensor parallelism), as a count that does
        // not divide the heads has none.
        assert!(!seen_err && seen_none, "{seen_err} {seen_none}");
        let gpt2 = fewest_peaks(&cases[3].0, &cases[3].1, &rt, 0);
        let (strategy, peaks) = &gpt2[0];
        assert_eq!(*strategy, Strategy::Tp);
        let peaks = peaks.as_ref().unwrap();
        assert!(peaks[0].1.is_some() && peaks[1..].iter().all(|(_, p)| p.is_none()));
        let strategies = |i: usize| -> Vec<Strategy> {
            fewest_peaks(&cases[i].0, &cases[i].1, &rt, 10)
                .iter()
                .map(|(s, _)| *s)
                .collect()
        };
        assert_eq!(
            strategies(0),
            [Strategy::Ddp, Strategy::Zero1, Strategy::Fsdp2]
        );
        // Autocast under FSDP2 as the Trainer and accelerate apply it.
        assert_eq!(
            strategies(1),
            [Strategy::Ddp, Strategy::Zero1, Strategy::Fsdp2]
        );
        assert_eq!(strategies(2), [Strategy::Tp]);
        assert!(strategies(4).is_empty());
    }

    /// Each card's fewest count is the first count whose peak fits the
    /// card's capacity (none when no count tried does), read from the one
    /// set of peaks the table computes.
    #[test]
    fn fewest_cards_per_card_from_one_set_of_peaks() {
        use headroom_core::bytes::GIB;
        let peaks: FewestPeaks = vec![
            (
                Strategy::Tp,
                Ok(vec![
                    (1, Some(150 * GIB)),
                    (2, Some(75 * GIB)),
                    (4, None),
                    (8, Some(20 * GIB)),
                ]),
            ),
            (
                Strategy::Ddp,
                Ok(vec![(1, Some(900 * GIB)), (2, Some(900 * GIB))]),
            ),
            (Strategy::Zero1, Err("`workload.seq_len`: too long".into())),
        ];
        // A card's capacity for one rank: its usable bytes less the margin.
        let card = |gb: u64, margin: u64| move |_: Strategy| gb * GIB * 100 / (100 + margin);
        assert_eq!(
            fewest_for(&peaks, card(140, 0)),
            vec![
                (Strategy::Tp, Ok(Some(2))),
                (Strategy::Ddp, Ok(None)),
                (Strategy::Zero1, Err("`workload.seq_len`: too long".into())),
            ]
        );
        // 4 has no peak: a 40 GB card needs 8.
        assert_eq!(
            fewest_for(&peaks, card(40, 0))[0],
            (Strategy::Tp, Ok(Some(8)))
        );
        // The margin leaves 75 GiB of 80 short: 8 cards.
        assert_eq!(
            fewest_for(&peaks, card(80, 0))[0],
            (Strategy::Tp, Ok(Some(2)))
        );
        assert_eq!(
            fewest_for(&peaks, card(80, 10))[0],
            (Strategy::Tp, Ok(Some(8)))
        );
        assert_eq!(fewest_for(&peaks, card(10, 0))[0], (Strategy::Tp, Ok(None)));
    }

    /// The whole table's rows carry each card's fewest cards per strategy,
    /// the core's `fewest_gpus` of one `rank_peaks` per strategy.
    #[test]
    fn rows_carry_the_fewest_cards_of_every_card() {
        use headroom_core::workload::Precision;
        let rt = RuntimeProfile::h200();
        let (arch, mut w) = training("llama-3.2-1b", Precision::Bf16);
        w.seq_len = 1024;
        let table = rows(&arch, &w, &rt, None, 10);
        let stop = stop_below(&arch, &w, &rt, 10);
        for r in &table {
            let expect: Vec<_> = strategies_for(&arch, &w)
                .into_iter()
                .map(|s| {
                    let cap = strategy_capacity(r.gpu, &arch, &w, &rt, s, 10);
                    let fewest = fewest_gpus(&rank_peaks(&arch, &w, &rt, s, stop).unwrap(), cap);
                    let alone = w.parallel.is_single() && r.jobs.is_some_and(|j| j > 0);
                    (s, Ok(if alone { Some(1) } else { fewest }))
                })
                .collect();
            assert_eq!(r.fewest, expect, "{}", r.gpu.id);
        }
        // A 1B model trains on one big card with any strategy.
        let h200 = table.iter().find(|r| r.gpu.id == "h200").unwrap();
        assert!(
            h200.fewest.iter().all(|(_, n)| *n == Ok(Some(1))),
            "{:?}",
            h200.fewest
        );
    }
}
