//! The main curve: core estimates at each length, and the stacked series the
//! chart draws from them. Only unit conversion happens here.

use crate::state::View;
use headroom_core::arch::Architecture;
use headroom_core::estimate::{estimate_reusing, Component, Estimate, EstimateOptions, Share};
use headroom_core::search::lengths;
use headroom_core::spec::{parse_model, parse_runtime, parse_workload};
use headroom_core::trace::Replay;
use headroom_core::workload::Workload;
use headroom_core::Bytes;
use headroom_core::RuntimeProfile;
use serde_json::Value;

/// Estimates along the length axis.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurveData {
    /// Lengths that estimated, ascending.
    pub lengths: Vec<u32>,
    /// The estimate at each of [`CurveData::lengths`].
    pub estimates: Vec<Estimate>,
    /// Lengths the core rejected.
    pub failed: usize,
    /// The first rejection, with its length.
    pub error: Option<(u32, String)>,
}

/// One length's outcome: the estimate, or the core's message.
pub type PointResult = Result<Estimate, String>;

/// The exact estimate at each of `lengths`, in order, on one replay whose
/// arrays are allocated once. This is all a curve costs; the page splits
/// the lengths over worker threads ([`share`]) and reassembles them
/// ([`CurveData::from_results`]).
pub fn estimate_lengths(
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    lengths: &[u32],
) -> Vec<PointResult> {
    let mut replay = Replay::new(runtime.allocator, None);
    lengths
        .iter()
        .map(|&length| estimate_point(&mut replay, arch, workload, runtime, length))
        .collect()
}

/// The exact estimate at one length, on `replay` (reused from one length
/// to the next).
pub fn estimate_point(
    replay: &mut Replay,
    arch: &Architecture,
    workload: &Workload,
    runtime: &RuntimeProfile,
    length: u32,
) -> PointResult {
    let w = workload.with_length(arch.is_vision(), length);
    estimate_reusing(replay, arch, &w, runtime, EstimateOptions::default())
        .map_err(|e| e.to_string())
}

/// Share `k` of `parts` of the lengths: every `parts`-th length from the
/// `k`-th, so that short and long replays spread evenly over the threads.
pub fn share(lengths: &[u32], parts: usize, k: usize) -> Vec<u32> {
    lengths
        .iter()
        .skip(k)
        .step_by(parts.max(1))
        .copied()
        .collect()
}

/// What a worker thread is asked: one share of a curve's lengths.
#[derive(Clone, Debug, PartialEq)]
pub struct ShareRequest {
    /// The model.
    pub arch: Architecture,
    /// The workload (its length is replaced by each of `lengths`).
    pub workload: Workload,
    /// The runtime profile.
    pub runtime: RuntimeProfile,
    /// The lengths to estimate.
    pub lengths: Vec<u32>,
    /// Asks for the GPU table instead (`fit::rows` at the workload as set,
    /// with this fragmentation margin in percent; `fit::encode_rows`).
    pub fit_margin: Option<u32>,
}

impl ShareRequest {
    /// The request as JSON: `model`, `workload` and `runtime` as in a spec,
    /// and `lengths`.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "model": self.arch,
            "workload": self.workload,
            "runtime": self.runtime,
            "lengths": self.lengths,
            "fit_margin": self.fit_margin,
        })
        .to_string()
    }

    /// Reads [`ShareRequest::to_json`] with the core's spec readers (the
    /// ones the page already uses for links, configs and profiles).
    pub fn from_json(text: &str) -> Result<ShareRequest, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let arch = parse_model(v.get("model")).map_err(|e| e.to_string())?.arch;
        let workload = parse_workload(v.get("workload")).map_err(|e| e.to_string())?;
        let runtime =
            parse_runtime(v.get("runtime").unwrap_or(&Value::Null)).map_err(|e| e.to_string())?;
        let lengths = v
            .get("lengths")
            .and_then(Value::as_array)
            .ok_or("`lengths` is missing")?
            .iter()
            .map(|l| {
                l.as_u64()
                    .and_then(|l| u32::try_from(l).ok())
                    .ok_or("`lengths`: not a length")
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let fit_margin = v
            .get("fit_margin")
            .and_then(Value::as_u64)
            .map(|m| m.min(u64::from(crate::defaults::MAX_MARGIN_PCT)) as u32);
        Ok(ShareRequest {
            arch,
            workload,
            runtime,
            lengths,
            fit_margin,
        })
    }
}

/// Answers a [`ShareRequest`] given as JSON with the outcome at each of its
/// lengths ([`encode_results`]), or one line saying why it could not be
/// read (what the page's worker threads run).
pub fn answer_share(request: &str) -> String {
    match ShareRequest::from_json(request) {
        Ok(r) => match r.fit_margin {
            Some(margin) => crate::fit::encode_rows(&crate::fit::rows(
                &r.arch,
                &r.workload,
                &r.runtime,
                None,
                margin,
            )),
            None => encode_results(&estimate_lengths(
                &r.arch,
                &r.workload,
                &r.runtime,
                &r.lengths,
            )),
        },
        Err(e) => format!("E worker request: {e}\n"),
    }
}

/// One line per outcome: `O` and the estimate's numbers (its breakdown as
/// component index and bytes), a tab, the peak op; or `E`, a space and the
/// message. Plain text keeps the page's bundle free of a second JSON
/// reader for estimates.
pub fn encode_results(results: &[PointResult]) -> String {
    use core::fmt::Write as _;
    let mut out = String::new();
    for result in results {
        match result {
            Ok(e) => {
                let _ = write!(
                    out,
                    "O {} {} {} {} {} {} {} {}",
                    e.driver_peak.0,
                    e.reserved_peak.0,
                    e.allocated_peak.0,
                    e.outside_allocator.0,
                    e.params,
                    e.weight_bytes.0,
                    u8::from(e.fits),
                    e.breakdown.len()
                );
                for share in &e.breakdown {
                    let index = Component::ALL.iter().position(|c| *c == share.component);
                    let _ = write!(out, " {} {}", index.unwrap_or(usize::MAX), share.bytes.0);
                }
                let _ = writeln!(out, "\t{}", e.peak_op.replace('\n', " "));
            }
            Err(message) => {
                let _ = writeln!(out, "E {}", message.replace('\n', " "));
            }
        }
    }
    out
}

/// Reads a worker's answer to a request of `expected` lengths.
pub fn read_share(response: &str, expected: usize) -> Result<Vec<PointResult>, String> {
    let bad = || "worker response: malformed".to_string();
    let mut results = Vec::with_capacity(expected);
    for line in response.lines() {
        if let Some(message) = line.strip_prefix("E ") {
            if message.starts_with("worker request:") {
                return Err(message.to_string());
            }
            results.push(Err(message.to_string()));
            continue;
        }
        let (numbers, peak_op) = line
            .strip_prefix("O ")
            .and_then(|l| l.split_once('\t'))
            .ok_or_else(bad)?;
        let n: Vec<u64> = numbers
            .split(' ')
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let shares = n.get(7).copied().ok_or_else(bad)? as usize;
        if n.len() != 8 + 2 * shares {
            return Err(bad());
        }
        let breakdown = n[8..]
            .chunks(2)
            .map(|pair| {
                Component::ALL
                    .get(pair[0] as usize)
                    .map(|&component| Share {
                        component,
                        bytes: Bytes(pair[1]),
                    })
            })
            .collect::<Option<Vec<Share>>>()
            .ok_or_else(bad)?;
        results.push(Ok(Estimate {
            driver_peak: Bytes(n[0]),
            reserved_peak: Bytes(n[1]),
            allocated_peak: Bytes(n[2]),
            outside_allocator: Bytes(n[3]),
            params: n[4],
            weight_bytes: Bytes(n[5]),
            fits: n[6] == 1,
            breakdown,
            peak_op: peak_op.to_string(),
        }));
    }
    if results.len() != expected {
        return Err(format!(
            "worker response: {} results for {expected} lengths",
            results.len()
        ));
    }
    Ok(results)
}

/// The lengths of the curve over the view's range (geometric on a log axis).
pub fn view_lengths(view: &View, count: usize) -> Vec<u32> {
    lengths(view.from, view.to, count, view.log_x)
}

impl CurveData {
    /// Estimates `count` lengths over the view's range on this thread.
    pub fn compute(
        arch: &Architecture,
        workload: &Workload,
        runtime: &RuntimeProfile,
        view: &View,
        count: usize,
    ) -> CurveData {
        let lengths = view_lengths(view, count);
        let results = estimate_lengths(arch, workload, runtime, &lengths);
        CurveData::from_results(&lengths, results)
    }

    /// Assembles a curve from the outcome at each length (in any order;
    /// `lengths[i]` goes with `results[i]`).
    pub fn from_results(lengths: &[u32], results: Vec<PointResult>) -> CurveData {
        let mut points: Vec<(u32, PointResult)> = lengths.iter().copied().zip(results).collect();
        points.sort_by_key(|p| p.0);
        let mut out = CurveData::default();
        for (length, result) in points {
            match result {
                Ok(e) => {
                    out.lengths.push(length);
                    out.estimates.push(e);
                }
                Err(e) => {
                    out.failed += 1;
                    if out.error.is_none() {
                        out.error = Some((length, e));
                    }
                }
            }
        }
        out
    }

    /// Index of the estimate nearest to `length` on the axis.
    pub fn nearest(&self, length: f64, log_x: bool) -> Option<usize> {
        let key = |l: f64| if log_x { l.max(1.0).ln() } else { l };
        let target = key(length);
        (0..self.lengths.len()).min_by(|&a, &b| {
            let da = (key(self.lengths[a] as f64) - target).abs();
            let db = (key(self.lengths[b] as f64) - target).abs();
            da.total_cmp(&db)
        })
    }

    /// Largest driver-level peak on the curve, GB.
    pub fn max_gb(&self) -> f64 {
        self.estimates
            .iter()
            .map(|e| e.driver_peak.as_gb())
            .fold(0.0, f64::max)
    }
}

/// One band of the stacked chart: a component and the cumulative top of its
/// band at each length, in GB.
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    /// The component.
    pub component: Component,
    /// Bottom of the band at each length, GB.
    pub lower: Vec<f64>,
    /// Top of the band at each length, GB.
    pub upper: Vec<f64>,
}

/// Stacks the breakdown in [`Component::ALL`] order, leaving out components
/// that are zero at every length. The last band's top is the driver peak.
pub fn bands(curve: &CurveData) -> Vec<Band> {
    let n = curve.estimates.len();
    let mut running = vec![0.0f64; n];
    let mut out = Vec::new();
    for component in Component::ALL {
        let values: Vec<f64> = curve
            .estimates
            .iter()
            .map(|e| e.component(component).as_gb())
            .collect();
        if values.iter().all(|&v| v == 0.0) {
            continue;
        }
        let lower = running.clone();
        for (r, v) in running.iter_mut().zip(&values) {
            *r += v;
        }
        out.push(Band {
            component,
            lower,
            upper: running.clone(),
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A synthetic estimate: weights fixed, activations growing with length.
    pub fn fake(length: u32) -> Estimate {
        let gb = 1_000_000_000u64;
        let parts = [
            (Component::CudaContext, gb / 2),
            (Component::Weights, 16 * gb),
            (Component::KvCache, length as u64 * 131_072),
            (Component::Activations, length as u64 * 50_000),
            (Component::AllocatorSlack, gb / 10),
        ];
        let breakdown: Vec<Share> = parts
            .iter()
            .map(|&(component, b)| Share {
                component,
                bytes: Bytes(b),
            })
            .collect();
        let total: u64 = parts.iter().map(|p| p.1).sum();
        Estimate {
            driver_peak: Bytes(total),
            reserved_peak: Bytes(total - gb / 2),
            allocated_peak: Bytes(total - gb / 2 - gb / 10),
            outside_allocator: Bytes(gb / 2),
            breakdown,
            peak_op: "layer 31: mlp, down_proj".into(),
            params: 8_030_261_248,
            weight_bytes: Bytes(16 * gb),
            fits: true,
        }
    }

    pub fn fake_curve(lengths: &[u32]) -> CurveData {
        CurveData {
            lengths: lengths.to_vec(),
            estimates: lengths.iter().map(|&l| fake(l)).collect(),
            failed: 0,
            error: None,
        }
    }

    #[test]
    fn bands_stack_to_the_driver_peak_and_skip_empty_components() {
        let curve = fake_curve(&[128, 1024, 65536]);
        let b = bands(&curve);
        assert_eq!(b.len(), 5);
        assert_eq!(b[0].component, Component::CudaContext);
        for (i, e) in curve.estimates.iter().enumerate() {
            let top = b.last().unwrap().upper[i];
            assert!((top - e.driver_peak.as_gb()).abs() < 1e-9);
            for w in b.windows(2) {
                assert_eq!(w[0].upper[i], w[1].lower[i]);
            }
        }
    }

    #[test]
    fn nearest_uses_the_axis_scale() {
        let curve = fake_curve(&[100, 1000, 10000]);
        assert_eq!(curve.nearest(400.0, true), Some(1));
        assert_eq!(curve.nearest(400.0, false), Some(0));
        assert_eq!(CurveData::default().nearest(5.0, false), None);
    }

    /// Splitting the lengths over threads and putting the shares back
    /// together gives the curve one thread computes.
    #[test]
    fn shares_reassemble_into_the_single_thread_curve() {
        let p = headroom_core::presets::find("llama-3.2-1b").unwrap();
        let s = crate::state::AppState::for_model(p.model());
        let rt = RuntimeProfile::h200();
        let whole = CurveData::compute(&p.arch, &s.workload, &rt, &s.view, 24);
        let all = view_lengths(&s.view, 24);
        for parts in [1, 2, 3, 7] {
            let mut lengths = Vec::new();
            let mut results = Vec::new();
            for k in 0..parts {
                let mine = share(&all, parts, k);
                results.extend(estimate_lengths(&p.arch, &s.workload, &rt, &mine));
                lengths.extend(mine);
            }
            assert_eq!(lengths.len(), all.len());
            assert_eq!(
                CurveData::from_results(&lengths, results),
                whole,
                "{parts} parts"
            );
        }
        assert_eq!(share(&[1, 2, 3, 4, 5], 2, 1), vec![2, 4]);
        assert!(share(&[1, 2], 3, 2).is_empty());
    }

    /// A share sent to a worker as JSON comes back with the estimates this
    /// thread computes, for every preset (nothing is lost on the way).
    #[test]
    fn a_share_through_json_gives_the_same_estimates() {
        let rt = RuntimeProfile::h200();
        for p in headroom_core::presets::all() {
            let s = crate::state::AppState::for_model(p.model());
            let lengths = share(&view_lengths(&s.view, 6), 2, 1);
            let request = ShareRequest {
                arch: p.arch.clone(),
                workload: s.workload.clone(),
                runtime: rt.clone(),
                lengths: lengths.clone(),
                fit_margin: None,
            };
            let json = request.to_json();
            assert_eq!(ShareRequest::from_json(&json).unwrap(), request, "{}", p.id);
            let answered = read_share(&answer_share(&json), lengths.len()).unwrap();
            assert_eq!(
                answered,
                estimate_lengths(&p.arch, &s.workload, &rt, &lengths),
                "{}",
                p.id
            );
        }
    }

    /// A GPU-table request answers with the table this thread computes.
    #[test]
    fn a_fit_request_through_json_gives_the_same_table() {
        let rt = RuntimeProfile::h200();
        let p = headroom_core::presets::find("gpt2").unwrap();
        let s = crate::state::AppState::for_model(p.model());
        let request = ShareRequest {
            arch: p.arch.clone(),
            workload: s.workload.clone(),
            runtime: rt.clone(),
            lengths: Vec::new(),
            fit_margin: Some(15),
        };
        let json = request.to_json();
        assert_eq!(ShareRequest::from_json(&json).unwrap(), request);
        let peak = Some(headroom_core::Bytes(5_000_000_000));
        assert_eq!(
            crate::fit::decode_rows(&answer_share(&json), peak, 15).unwrap(),
            crate::fit::rows(&p.arch, &s.workload, &rt, peak, 15)
        );
    }

    /// Every workload option the page can set survives the trip to a
    /// worker (a field lost on the way would give a different curve).
    #[test]
    #[allow(clippy::field_reassign_with_default)]
    fn a_share_request_keeps_every_workload_option() {
        use headroom_core::arch::Dtype;
        use headroom_core::workload::{
            Attention, InferenceKind, LoadPath, Logits, Lora, Mode, Optimizer, Precision,
        };
        let mut variants = Vec::new();
        let mut w = Workload::default();
        w.mode = Mode::Training;
        w.batch = 3;
        w.seq_len = 777;
        w.attention = Attention::Eager;
        w.training.optimizer = Optimizer::SgdMomentum;
        w.training.steps = 3;
        w.training.precision = Precision::Bf16;
        w.training.grad_checkpointing = true;
        w.training.optimizer_state_resident = true;
        w.training.use_cache = true;
        w.load = LoadPath::BuildThenCast;
        variants.push(w.clone());
        w.training.lora = Some(Lora {
            rank: 8,
            alpha: Some(16.0),
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            dropout: None,
        });
        variants.push(w);
        let mut w = Workload::default();
        w.dtype = Dtype::Int4;
        w.inference.kind = InferenceKind::Forward;
        w.inference.logits = Logits::All;
        w.inference.kv_cache = false;
        w.inference.new_tokens = 5;
        w.inference.kv_dtype = Some(Dtype::Int8);
        variants.push(w);
        let mut fold = Workload::default();
        fold.dtype = Dtype::Fp32;
        fold.esmfold.stem_dtype = Dtype::Fp32;
        fold.esmfold.chunk_size = Some(64);
        fold.esmfold.num_recycles = Some(1);
        let mut vision = Workload::default();
        vision.image_size = Some(384);
        let mut runtime = RuntimeProfile::h200();
        runtime.process_ran_backward = false;
        runtime.cudnn_workspace_scale = 0.5;
        for (id, w) in variants
            .into_iter()
            .map(|w| ("llama-3.2-1b", w))
            .chain([("esmfold-v1", fold), ("vit-b-16", vision)])
        {
            let arch = headroom_core::presets::find(id).unwrap().arch;
            let request = ShareRequest {
                arch,
                workload: w,
                runtime: runtime.clone(),
                lengths: vec![128, 4096],
                fit_margin: None,
            };
            assert_eq!(
                ShareRequest::from_json(&request.to_json()),
                Ok(request),
                "{id}"
            );
        }
    }

    #[test]
    fn a_bad_share_is_an_error_not_a_panic() {
        let r = read_share(&answer_share("{\"model\": 5}"), 1).unwrap_err();
        assert!(r.starts_with("worker request:"), "{r}");
        let r = read_share(&answer_share("not json"), 1).unwrap_err();
        assert!(r.starts_with("worker request:"), "{r}");
        assert!(read_share("O 1 2\tx", 1).unwrap_err().contains("malformed"));
        assert!(read_share("O 1 2 3 4 5 6 1 1 99 7\tx", 1)
            .unwrap_err()
            .contains("malformed"));
        assert!(read_share("", 2).unwrap_err().contains("0 results for 2"));
        // An estimate that failed at one length travels as its message.
        let results = vec![Ok(fake(100)), Err("too long".to_string())];
        assert_eq!(read_share(&encode_results(&results), 2).unwrap(), results);
    }

    #[test]
    fn the_first_rejected_length_is_reported_in_length_order() {
        let lengths = [300, 100, 200];
        let results = vec![Err("c".into()), Ok(fake(100)), Err("b".into())];
        let c = CurveData::from_results(&lengths, results);
        assert_eq!(c.lengths, vec![100]);
        assert_eq!(c.failed, 2);
        assert_eq!(c.error, Some((200, "b".into())));
    }

    #[test]
    fn core_errors_are_kept_not_panicked() {
        // Whatever the families support today, computing never panics and
        // every length is either estimated or counted as failed.
        for p in headroom_core::presets::all() {
            let s = crate::state::AppState::for_model(p.model());
            let c = CurveData::compute(&p.arch, &s.workload, &RuntimeProfile::h200(), &s.view, 16);
            assert_eq!(
                c.lengths.len() + c.failed,
                lengths(s.view.from, s.view.to, 16, s.view.log_x).len()
            );
            assert_eq!(c.error.is_some(), c.failed > 0, "{}", p.id);
        }
    }
}
