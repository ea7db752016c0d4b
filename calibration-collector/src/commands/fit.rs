//! `headroom fit`: fit the runtime coefficients of the core's
//! [`RuntimeProfile`] to measurement files and write a calibration profile.
//!
//! The allocator replay predicts torch's reserved bytes at the peak; what the
//! driver shows beyond that is the outside-allocator overhead. For each point
//! `y = measured driver_peak - predicted reserved at the peak` (or minus
//! torch's measured `reserved_peak` with `--basis torch`), and
//! `y = inference + training * backward + cnn * cudnn` is fitted by least
//! squares: `inference` is context + cuBLAS library + model kernels, split
//! with the figures of a `probe` (or the prior's, without one); `backward`
//! and `cudnn` are fitted only when the points tell them apart from
//! `inference` (some with, some without), else kept at the prior.

use crate::cases::{apply_profile, classify, read_records, Classified, Prediction, Status};
use crate::commands::probe::{torch_cublas_workspace_bytes, ProbeReport};
use crate::error::{CollectorError, Result};
use crate::profile::{self, Coefficient, FitInfo, GpuFacts, Profile, SummaryPair, SCHEMA_VERSION};
use crate::stats::{relative_error, Summary};
use headroom_core::estimate::estimate;
use headroom_core::families;
use headroom_core::readers::Spec;
use headroom_core::RuntimeProfile;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Granularity of device-memory readings (the driver maps 2 MiB pages): the
/// floor of every uncertainty.
pub const READING_GRANULARITY: f64 = (2u64 << 20) as f64;

/// What `y` is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Basis {
    /// `torch` when every point has torch's `reserved_peak`, else `predicted`.
    #[default]
    Auto,
    /// Measured driver peak minus torch's measured reserved peak: exactly the
    /// bytes outside the allocator, whatever the allocator model's error.
    Torch,
    /// Measured driver peak minus the core's predicted reserved peak, weighted
    /// by 1/measured^2 (relative errors): also absorbs the allocator model's
    /// mean error, for points without torch's counters.
    Predicted,
}

impl Basis {
    fn name(self) -> &'static str {
        match self {
            Basis::Torch => "torch_reserved",
            Basis::Predicted | Basis::Auto => "predicted_reserved",
        }
    }
}

/// Options of `fit` (its command-line flags).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FitArgs {
    /// Measurement files (from `run`, or in the measurement format of docs/spec.md).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// A `probe --json` report: splits the overhead into context and cuBLAS.
    #[arg(long)]
    pub probe: Option<String>,
    /// Where to write the profile (default: calibration-profile-<gpu>-<date>.json).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace an existing output file.
    #[arg(long)]
    pub force: bool,
    /// Profile name (default: GPU, torch and driver versions).
    #[arg(long)]
    pub name: Option<String>,
    /// What the overhead is measured against: torch's reserved peak (auto: when every point has it) or the core's predicted one.
    #[arg(long, value_enum, default_value_t = Basis::Auto)]
    pub basis: Basis,
    /// Leave out cases whose name contains this (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Print the profile as JSON instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// One point's overhead observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    /// Case name.
    pub case: String,
    /// Bytes outside the allocator (measured driver peak minus reserved).
    pub y: f64,
    /// A training point (backward handle and kernels).
    pub training: bool,
    /// A cuDNN point.
    pub cudnn: bool,
    /// Least-squares weight.
    pub weight: f64,
}

/// An estimated quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimated {
    /// Bytes.
    pub value: f64,
    /// One standard error, bytes.
    pub se: f64,
    /// Fitted (true) or kept at the prior (false).
    pub fitted: bool,
    /// Cases that informed it.
    pub cases: Vec<String>,
}

/// The least-squares result.
#[derive(Clone, Debug, PartialEq)]
pub struct OverheadFit {
    /// Context + cuBLAS library + model kernels (every point).
    pub inference: Estimated,
    /// Backward handle and kernels (training points).
    pub backward: Estimated,
    /// cuDNN (convolutional points).
    pub cudnn: Estimated,
    /// Standard deviation of the residuals, bytes.
    pub residual_std: f64,
}

/// Weighted least squares `X b = y` (weights `w`); returns `b` and
/// `(X^T W X)^-1`, or `None` when the columns are dependent.
pub fn least_squares(x: &[Vec<f64>], y: &[f64], w: &[f64]) -> Option<(Vec<f64>, Vec<Vec<f64>>)> {
    let p = x.first()?.len();
    let mut a = vec![vec![0.0; 2 * p]; p];
    let mut xty = vec![0.0; p];
    for ((row, &yi), &wi) in x.iter().zip(y).zip(w) {
        for i in 0..p {
            xty[i] += wi * row[i] * yi;
            for j in 0..p {
                a[i][j] += wi * row[i] * row[j];
            }
        }
    }
    for (i, r) in a.iter_mut().enumerate() {
        r[p + i] = 1.0;
    }
    // Gauss-Jordan with partial pivoting on [XtX | I].
    for col in 0..p {
        let pivot = (col..p).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-9 {
            return None;
        }
        a.swap(col, pivot);
        let d = a[col][col];
        for v in a[col].iter_mut() {
            *v /= d;
        }
        for r in 0..p {
            if r != col {
                let f = a[r][col];
                if f != 0.0 {
                    let pivot_row = a[col].clone();
                    for (v, pv) in a[r].iter_mut().zip(pivot_row) {
                        *v -= f * pv;
                    }
                }
            }
        }
    }
    let inv: Vec<Vec<f64>> = a.iter().map(|r| r[p..].to_vec()).collect();
    let b = (0..p)
        .map(|i| (0..p).map(|j| inv[i][j] * xty[j]).sum())
        .collect();
    Some((b, inv))
}

/// Fits the overheads, keeping at `prior` what the points cannot tell apart.
pub fn fit_overheads(points: &[Observation], prior: &RuntimeProfile) -> Result<OverheadFit> {
    if points.is_empty() {
        return Err(CollectorError::input(
            "fit: no usable points (every case was skipped: not modelled by the core, out of memory or failed)",
        ));
    }
    let prior_backward = prior.backward_library_bytes as f64;
    let prior_cudnn = prior.cudnn_library_bytes as f64;
    let any = |f: fn(&Observation) -> bool| points.iter().any(f);
    let fit_backward = any(|o| o.training) && any(|o| !o.training);
    let fit_cudnn = any(|o| o.cudnn) && any(|o| !o.cudnn);
    let mut x = Vec::new();
    let mut y = Vec::new();
    for o in points {
        let mut row = vec![1.0];
        let mut yi = o.y;
        if fit_backward {
            row.push(f64::from(u8::from(o.training)));
        } else if o.training {
            yi -= prior_backward;
        }
        if fit_cudnn {
            row.push(f64::from(u8::from(o.cudnn)));
        } else if o.cudnn {
            yi -= prior_cudnn;
        }
        x.push(row);
        y.push(yi);
    }
    let p = x[0].len();
    // Normalise the weights to mean 1 so that the residual variance is in bytes^2.
    let mean_w = points.iter().map(|o| o.weight).sum::<f64>() / points.len() as f64;
    let w: Vec<f64> = points.iter().map(|o| o.weight / mean_w).collect();
    let (b, inv) = least_squares(&x, &y, &w).ok_or_else(|| {
        CollectorError::input(
            "fit: the points cannot separate the coefficients (dependent columns)",
        )
    })?;
    let n = points.len();
    let rss: f64 = x
        .iter()
        .zip(&y)
        .zip(&w)
        .map(|((row, yi), wi)| {
            let fitted: f64 = row.iter().zip(&b).map(|(a, c)| a * c).sum();
            wi * (yi - fitted).powi(2)
        })
        .sum();
    let residual_std = if n > p {
        (rss / (n - p) as f64).sqrt()
    } else {
        0.0
    };
    // With no residual degrees of freedom the spread is unknown: fall back to
    // the reading granularity.
    let sigma = if n > p {
        residual_std
    } else {
        READING_GRANULARITY
    };
    let se = |i: usize| {
        (sigma * sigma * inv[i][i])
            .sqrt()
            .max(READING_GRANULARITY / (n as f64).sqrt())
    };
    let names = |f: &dyn Fn(&Observation) -> bool| -> Vec<String> {
        points
            .iter()
            .filter(|o| f(o))
            .map(|o| o.case.clone())
            .collect()
    };
    let mut col = 1;
    let mut next = |fitted: bool, prior: f64, cases: Vec<String>| {
        if fitted {
            let e = Estimated {
                value: b[col],
                se: se(col),
                fitted: true,
                cases,
            };
            col += 1;
            e
        } else {
            Estimated {
                value: prior,
                se: 0.0,
                fitted: false,
                cases: Vec::new(),
            }
        }
    };
    let backward = next(fit_backward, prior_backward, names(&|o| o.training));
    let cudnn = next(fit_cudnn, prior_cudnn, names(&|o| o.cudnn));
    Ok(OverheadFit {
        inference: Estimated {
            value: b[0],
            se: se(0),
            fitted: true,
            cases: names(&|_| true),
        },
        backward,
        cudnn,
        residual_std,
    })
}

/// A measured peak above the memory of the card it was measured on cannot
/// be: refuses it naming the case and both figures (a hand-edited or
/// corrupted file would otherwise drag every coefficient with it).
fn refuse_peaks_above_their_card(points: &[FitPoint]) -> Result<()> {
    for p in points {
        let capacity = p
            .value
            .get("measured")
            .and_then(|m| m.get("capacity_bytes"))
            .and_then(Value::as_u64);
        if let Some(capacity) = capacity.filter(|&c| p.measured > c) {
            return Err(CollectorError::input(format!(
                "fit: case \"{}\": `measured.driver_peak` ({} bytes) is more than the card's memory (`measured.capacity_bytes`: {capacity} bytes); a measurement cannot exceed its card: correct or remove the case",
                p.value["case"].as_str().unwrap_or(""),
                p.measured
            )));
        }
    }
    Ok(())
}

/// The observation farthest from the median of the others' bytes outside
/// the allocator, in words: where a fit went out of range, the case to
/// look at first.
fn farthest_from_the_others(observations: &[Observation]) -> String {
    let mut ys: Vec<f64> = observations.iter().map(|o| o.y).collect();
    ys.sort_by(f64::total_cmp);
    let median = ys[ys.len() / 2];
    let far = observations
        .iter()
        .max_by(|a, b| (a.y - median).abs().total_cmp(&(b.y - median).abs()))
        .expect("a fit has points");
    format!(
        "case \"{}\" measured {} outside the allocator, the median case {}",
        far.case,
        mb(far.y),
        mb(median)
    )
}

/// A point that entered the fit.
#[derive(Clone, Debug)]
struct FitPoint {
    value: Value,
    spec: Spec,
    measured: u64,
}

fn mb(v: f64) -> String {
    format!("{:.1} MB", v / 1e6)
}

/// Result of `fit`: the profile and the report text.
pub struct FitOutput {
    /// The profile to write.
    pub profile: Profile,
    /// Lines for the terminal (the summary line last).
    pub report: String,
}

fn read_probe(path: &str) -> Result<ProbeReport> {
    let text = crate::cases::read_text(path)?;
    serde_json::from_str(&text)
        .map_err(|e| CollectorError::input(format!("{path}: not a `probe --json` report: {e}")))
}

fn string_of(v: &Value, key: &str) -> Option<String> {
    v.get("runtime")?.get(key)?.as_str().map(str::to_string)
}

/// Keeps only the fields a profile point may carry (no commands, no errors).
fn sanitise_point(v: &Value, before: u64, after: u64, measured: u64) -> Value {
    let mut out = Map::new();
    for key in ["case", "model", "params", "weight_bytes", "workload"] {
        if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
            out.insert(key.into(), x.clone());
        }
    }
    let pick = |obj: Option<&Value>, keys: &[&str]| -> Value {
        let mut m = Map::new();
        if let Some(Value::Object(o)) = obj {
            for k in keys {
                if let Some(x) = o.get(*k).filter(|x| !x.is_null()) {
                    m.insert((*k).into(), x.clone());
                }
            }
        }
        Value::Object(m)
    };
    out.insert(
        "runtime".into(),
        pick(v.get("runtime"), &profile::POINT_RUNTIME_KEYS),
    );
    out.insert(
        "measured".into(),
        pick(v.get("measured"), &profile::POINT_MEASURED_KEYS),
    );
    let round = |e: f64| (e * 1e5).round() / 1e5;
    out.insert(
        "prediction".into(),
        json!({
            "before": before,
            "after": after,
            "error_before": round(relative_error(before, measured)),
            "error_after": round(relative_error(after, measured)),
        }),
    );
    Value::Object(out)
}

/// Runs `fit`.
pub fn run(args: &FitArgs) -> Result<FitOutput> {
    crate::cases::refuse_repeated_files("fit", &args.files)?;
    let probe = args.probe.as_deref().map(read_probe).transpose()?;
    let probe_device = probe.as_ref().and_then(|p| p.devices.first().cloned());
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    let mut names = crate::cases::CaseNames::default();
    for file in &args.files {
        let mut history = headroom_core::readers::ProcessHistory::default();
        for record in read_records(file)? {
            let case = match classify(&record)? {
                Classified::Overheads => continue,
                Classified::Case(c) => c,
            };
            names.add(&case.name, &case.origin);
            if let Some(x) = args.exclude.iter().find(|x| case.name.contains(x.as_str())) {
                skipped.push((case.name.clone(), format!("excluded (--exclude {x})")));
                continue;
            }
            if case.status != Status::Ok {
                skipped.push((
                    case.name.clone(),
                    format!("{:?}", case.status).to_lowercase(),
                ));
                continue;
            }
            match crate::cases::predict(&case, None, &mut history)? {
                Prediction::Skipped(why) => skipped.push((case.name.clone(), why)),
                Prediction::Predicted { spec, .. } => points.push(FitPoint {
                    measured: case.driver_peak.expect("ok cases have one"),
                    value: case.value.clone(),
                    spec: *spec,
                }),
            }
        }
    }
    names.refuse_duplicates(&args.files)?;
    refuse_peaks_above_their_card(&points)?;
    if points.is_empty() {
        return Err(CollectorError::input(format!(
            "fit: no usable points in {} ({} skipped: cases the core does not model yet, out-of-memory or failed points)",
            args.files.join(", "),
            skipped.len()
        )));
    }
    // One card and one runtime per profile.
    let first = &points[0].value;
    for key in ["gpu", "torch"] {
        let want = string_of(first, key);
        if let Some(p) = points.iter().find(|p| string_of(&p.value, key) != want) {
            let shown = |v: Option<String>| v.map_or("absent".to_string(), |s| format!("\"{s}\""));
            return Err(CollectorError::input(format!(
                "fit: points come from different runtimes: `runtime.{key}` is {} in case {} but {} in case {}; fit one card and runtime at a time",
                shown(want.clone()),
                first["case"].as_str().unwrap_or(""),
                shown(string_of(&p.value, key)),
                p.value["case"].as_str().unwrap_or("")
            )));
        }
    }
    let torch_reserved = |p: &FitPoint| {
        p.value
            .get("measured")
            .and_then(|m| m.get("reserved_peak"))
            .and_then(Value::as_u64)
    };
    let basis = match args.basis {
        Basis::Auto if points.iter().all(|p| torch_reserved(p).is_some()) => Basis::Torch,
        Basis::Auto => Basis::Predicted,
        Basis::Torch => {
            if let Some(p) = points.iter().find(|p| torch_reserved(p).is_none()) {
                return Err(CollectorError::input(format!(
                    "fit --basis torch: case {} has no `measured.reserved_peak`; use --basis predicted",
                    p.value["case"]
                )));
            }
            Basis::Torch
        }
        b => b,
    };
    let prior = points[0].spec.runtime.clone();
    // The workspace is inside the allocator: fixed by torch per compute capability.
    let mut base = prior.clone();
    if let Some(d) = &probe_device {
        base.cublas_workspace_bytes = torch_cublas_workspace_bytes(&d.info.compute_capability);
    }
    let mut observations = Vec::new();
    let mut befores = Vec::new();
    for p in &points {
        let before = estimate(
            &p.spec.model.arch,
            &p.spec.workload,
            &apply_profile(&p.spec.runtime, &prior),
        )
        .map_err(|e| CollectorError::input(format!("case {}: {e}", p.value["case"])))?;
        befores.push(before.driver_peak.0);
        let est = estimate(
            &p.spec.model.arch,
            &p.spec.workload,
            &apply_profile(&p.spec.runtime, &base),
        )
        .map_err(|e| CollectorError::input(format!("case {}: {e}", p.value["case"])))?;
        let reserved_pred = est.driver_peak.0 - est.outside_allocator.0;
        let (reserved, weight) = match basis {
            Basis::Torch => (torch_reserved(p).unwrap_or(reserved_pred), 1.0),
            _ => (reserved_pred, (1e9 / p.measured as f64).powi(2)),
        };
        let libs = families::libraries(&p.spec.model.arch, &p.spec.workload, &p.spec.runtime);
        observations.push(Observation {
            case: p.value["case"].as_str().unwrap_or("").to_string(),
            y: p.measured as f64 - reserved as f64,
            training: libs.backward,
            cudnn: libs.cudnn,
            weight,
        });
    }
    let fit = fit_overheads(&observations, &base)?;

    // Split `inference` into context, cuBLAS library and model kernels.
    let overheads = probe_device.as_ref().and_then(|d| d.overheads.clone());
    let probe_src = |what: &str| {
        let d = probe_device.as_ref().expect("probe given");
        format!(
            "probe of GPU {} ({}): {what}, measured from outside a fresh process",
            d.info.ordinal, d.info.name
        )
    };
    let (ctx, ctx_se, ctx_src) = match &overheads {
        Some(o) => (
            o.context_bytes as f64,
            READING_GRANULARITY,
            probe_src("CUDA context"),
        ),
        None => (
            base.cuda_context_bytes as f64,
            0.0,
            "prior (no probe given): the core's H200 default".to_string(),
        ),
    };
    let (mut cublas, cublas_se, mut cublas_src) =
        match overheads.as_ref().and_then(|o| o.cublas_library_bytes) {
            Some(b) => (
                b as f64,
                READING_GRANULARITY,
                probe_src("cuBLAS handle and first-matmul kernels"),
            ),
            None => (
                base.cublas_library_bytes as f64,
                0.0,
                "prior (no probe figure): the core's H200 default".to_string(),
            ),
        };
    let mut kernels = fit.inference.value - ctx - cublas;
    let mut kernels_src = format!(
        "least squares over {} point(s): measured driver_peak minus {} reserved peak, minus context and cuBLAS library",
        observations.len(),
        if basis == Basis::Torch { "torch's measured" } else { "predicted (weighted by 1/measured^2)" }
    );
    if kernels < 0.0 {
        // The points see less than context + cuBLAS: take it from cuBLAS.
        cublas = (cublas + kernels).max(0.0);
        kernels = 0.0;
        cublas_src
            .push_str("; lowered so that context + cuBLAS + kernels match the fitted overhead");
        kernels_src.push_str(" (clamped at 0)");
    }
    let kernels_se = (fit.inference.se.powi(2) + ctx_se.powi(2) + cublas_se.powi(2)).sqrt();
    let round = |v: f64| v.max(0.0).round() as u64;
    let nccl = probe.as_ref().and_then(|p| p.nccl.clone());
    let mut runtime = RuntimeProfile {
        cuda_context_bytes: round(ctx),
        cublas_library_bytes: round(cublas),
        model_kernels_bytes: round(kernels),
        backward_library_bytes: round(fit.backward.value),
        cudnn_library_bytes: round(fit.cudnn.value),
        cublas_workspace_bytes: base.cublas_workspace_bytes,
        ..base.clone()
    };
    if let Err(e) = runtime.validate() {
        return Err(CollectorError::input(format!(
            "fit: {e}\n  the points disagree: {}",
            farthest_from_the_others(&observations)
        )));
    }
    let mut coefficients = BTreeMap::new();
    let mut add = |name: &str, value: u64, se: f64, source: String, cases: Vec<String>| {
        coefficients.insert(
            name.to_string(),
            Coefficient {
                value,
                uncertainty: se.round() as u64,
                source,
                cases,
            },
        );
    };
    add(
        "cuda_context_bytes",
        runtime.cuda_context_bytes,
        ctx_se,
        ctx_src,
        Vec::new(),
    );
    add(
        "cublas_library_bytes",
        runtime.cublas_library_bytes,
        cublas_se,
        cublas_src,
        Vec::new(),
    );
    add(
        "model_kernels_bytes",
        runtime.model_kernels_bytes,
        kernels_se,
        kernels_src,
        fit.inference.cases.clone(),
    );
    let kept =
        |what: &str| format!("prior: the core's H200 default (the points do not separate {what})");
    add(
        "backward_library_bytes",
        runtime.backward_library_bytes,
        fit.backward.se,
        if fit.backward.fitted {
            "least squares: training points' overhead beyond inference points'".into()
        } else {
            kept("training from inference")
        },
        fit.backward.cases.clone(),
    );
    add(
        "cudnn_library_bytes",
        runtime.cudnn_library_bytes,
        fit.cudnn.se,
        if fit.cudnn.fitted {
            "least squares: convolutional points' overhead beyond the others'".into()
        } else {
            kept("convolutional from other points")
        },
        fit.cudnn.cases.clone(),
    );
    add(
        "cublas_workspace_bytes",
        runtime.cublas_workspace_bytes,
        0.0,
        match &probe_device {
            Some(d) => format!("torch's CublasHandlePool.cpp default for compute capability {} (inside torch's allocator)", d.info.compute_capability),
            None => "prior: the core's H200 default (inside torch's allocator)".into(),
        },
        Vec::new(),
    );

    if let Some(n) = &nccl {
        let src = |what: &str| {
            format!(
                "probe on {} rank(s) (NCCL {}, NVLink multicast {}): {what}, measured by the several-GPU harness",
                n.world_size,
                n.nccl_version.as_deref().unwrap_or("version unknown"),
                if n.nvls { "on" } else { "off" }
            )
        };
        runtime.nccl_communicator_bytes = n.communicator_bytes;
        add(
            "nccl_communicator_bytes",
            n.communicator_bytes,
            READING_GRANULARITY,
            src("one rank's process group and first all-reduce"),
            Vec::new(),
        );
        if let Some(peer) = n.peer_bytes {
            runtime.nccl_peer_bytes = peer;
            add(
                "nccl_peer_bytes",
                peer,
                READING_GRANULARITY,
                src("the highest rank's bytes beyond one rank's, per peer"),
                Vec::new(),
            );
        }
    }

    // Predictions before and after.
    let mut rows = Vec::new();
    let mut profile_points = Vec::new();
    let (mut err_before, mut err_after) = (Vec::new(), Vec::new());
    for (p, before) in points.iter().zip(&befores) {
        let after = estimate(
            &p.spec.model.arch,
            &p.spec.workload,
            &apply_profile(&p.spec.runtime, &runtime),
        )
        .map_err(|e| CollectorError::input(format!("case {}: {e}", p.value["case"])))?
        .driver_peak
        .0;
        err_before.push(relative_error(*before, p.measured));
        err_after.push(relative_error(after, p.measured));
        rows.push((
            p.value["case"].as_str().unwrap_or("").to_string(),
            *before,
            after,
            p.measured,
        ));
        profile_points.push(sanitise_point(&p.value, *before, after, p.measured));
    }
    let summary = SummaryPair {
        before: Summary::of(&err_before),
        after: Summary::of(&err_after),
    };

    let gpu_name = probe_device
        .as_ref()
        .map(|d| d.info.name.clone())
        .or_else(|| string_of(first, "gpu"))
        .unwrap_or_else(|| "unknown GPU".into());
    let total = probe_device
        .as_ref()
        .map(|d| d.info.total_bytes)
        .or_else(|| {
            first
                .get("runtime")
                .and_then(|r| r.get("gpu_total_bytes"))
                .and_then(Value::as_u64)
        })
        .unwrap_or(0);
    // Named as the user wrote it (the profile's `gpu.total_bytes` derives
    // from it).
    if !(1 << 30..=1 << 44).contains(&total) {
        return Err(CollectorError::input(format!(
            "case {}: `runtime.gpu_total_bytes` is {}; allowed: the card's total memory, a whole number of bytes from 1073741824 to 17592186044416 (as `run` writes it), or `--probe FILE` from `probe --json`",
            first["case"],
            if total == 0 { "missing or not a whole number".to_string() } else { format!("{total}, out of range") }
        )));
    }
    let torch = string_of(first, "torch");
    let driver = probe
        .as_ref()
        .and_then(|p| p.driver.driver.clone())
        .or_else(|| string_of(first, "driver"));
    let name = args.name.clone().unwrap_or_else(|| {
        let mut n = gpu_name.clone();
        if let Some(t) = &torch {
            n.push_str(&format!(", torch {t}"));
        }
        if let Some(d) = &driver {
            n.push_str(&format!(", driver {d}"));
        }
        n
    });
    let runtime = RuntimeProfile {
        gpu: Some(gpu_name.clone()),
        gpu_total_bytes: (total > 0).then_some(total),
        ..runtime
    };
    let profile = Profile {
        schema_version: SCHEMA_VERSION,
        name,
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        collector_version: env!("CARGO_PKG_VERSION").into(),
        gpu: GpuFacts {
            name: gpu_name,
            total_bytes: total,
            compute_capability: probe_device
                .as_ref()
                .map(|d| d.info.compute_capability.clone()),
        },
        driver,
        cuda: string_of(first, "cuda"),
        torch,
        transformers: string_of(first, "transformers"),
        runtime,
        coefficients,
        fit: FitInfo {
            basis: basis.name().into(),
            points_used: points.len(),
            points_skipped: skipped.len(),
            residual_std_bytes: fit.residual_std.round() as u64,
        },
        summary,
        points: profile_points,
    };
    // What fit writes must pass what upload checks (privacy scan aside: the
    // user reviews the file before uploading).
    profile::validate(&profile)
        .map_err(|e| CollectorError::input(format!("fit: the fitted profile is invalid: {e}")))?;
    let report = render(&profile, &rows, &skipped);
    Ok(FitOutput { profile, report })
}

fn render(p: &Profile, rows: &[(String, u64, u64, u64)], skipped: &[(String, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", p.name);
    let _ = writeln!(
        out,
        "{:<24} {:>12} {:>12}  source",
        "coefficient", "value", "± 1 s.e."
    );
    for (name, c) in &p.coefficients {
        let _ = writeln!(
            out,
            "{:<24} {:>12} {:>12}  {}",
            name,
            mb(c.value as f64),
            mb(c.uncertainty as f64),
            c.source
        );
    }
    let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(
        out,
        "# {:<w$} {:>12} {:>12} {:>12} {:>7} {:>7}",
        "case",
        "before",
        "after",
        "measured",
        "err_bef",
        "err_aft",
        w = width.saturating_sub(2)
    );
    for (case, before, after, measured) in rows {
        let _ = writeln!(
            out,
            "{:<width$} {:>10.3}GB {:>10.3}GB {:>10.3}GB {:>+6.1}% {:>+6.1}%",
            case,
            *before as f64 / 1e9,
            *after as f64 / 1e9,
            *measured as f64 / 1e9,
            relative_error(*before, *measured) * 100.0,
            relative_error(*after, *measured) * 100.0
        );
    }
    for (case, why) in skipped {
        let _ = writeln!(out, "{case:<width$} skipped: {why}");
    }
    let _ = writeln!(out, "before the fit: {}", p.summary.before);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(case: &str, y: f64, training: bool, cudnn: bool) -> Observation {
        Observation {
            case: case.into(),
            y,
            training,
            cudnn,
            weight: 1.0,
        }
    }

    #[test]
    fn least_squares_solves_a_known_system() {
        let x = vec![vec![1.0, 0.0], vec![1.0, 1.0], vec![1.0, 2.0]];
        let (b, _) = least_squares(&x, &[1.0, 3.0, 5.0], &[1.0, 1.0, 1.0]).unwrap();
        assert!((b[0] - 1.0).abs() < 1e-9 && (b[1] - 2.0).abs() < 1e-9);
        assert!(
            least_squares(&[vec![1.0, 1.0], vec![1.0, 1.0]], &[1.0, 2.0], &[1.0, 1.0]).is_none()
        );
        // Weights pull the fit towards heavy points.
        let (b, _) = least_squares(&[vec![1.0], vec![1.0]], &[0.0, 10.0], &[3.0, 1.0]).unwrap();
        assert!((b[0] - 2.5).abs() < 1e-9);
    }

    #[test]
    fn recovers_known_overheads_from_synthetic_points() {
        let (inf, bwd, cudnn) = (730e6, 86e6, 8.4e6);
        // Deterministic noise of +-1 MiB.
        let noise = |i: usize| ((i * 7919) % 11) as f64 / 5.0 - 1.0;
        let mut points = Vec::new();
        for i in 0..30 {
            let training = i % 3 == 0;
            let conv = i % 5 == 0;
            let y = inf
                + if training { bwd } else { 0.0 }
                + if conv { cudnn } else { 0.0 }
                + noise(i) * (1 << 20) as f64;
            points.push(obs(&format!("p{i}"), y, training, conv));
        }
        let f = fit_overheads(&points, &RuntimeProfile::h200()).unwrap();
        assert!((f.inference.value - inf).abs() < 1.5e6, "{f:?}");
        assert!((f.backward.value - bwd).abs() < 1.5e6, "{f:?}");
        assert!((f.cudnn.value - cudnn).abs() < 1.5e6, "{f:?}");
        assert!(f.backward.fitted && f.cudnn.fitted);
        // The stated uncertainty covers the error and is small.
        assert!(f.inference.se > 0.0 && f.inference.se < 2e6);
        assert!((f.inference.value - inf).abs() < 4.0 * f.inference.se.max(READING_GRANULARITY));
        assert!(f.residual_std > 0.3e6 && f.residual_std < 1.5e6);
    }

    #[test]
    fn keeps_priors_the_points_cannot_separate() {
        let prior = RuntimeProfile::h200();
        let points = vec![obs("a", 900e6, true, false), obs("b", 902e6, true, false)];
        let f = fit_overheads(&points, &prior).unwrap();
        assert!(!f.backward.fitted && !f.cudnn.fitted);
        assert_eq!(f.backward.value, prior.backward_library_bytes as f64);
        assert!((f.inference.value - (901e6 - prior.backward_library_bytes as f64)).abs() < 1.0);
        // One point: the uncertainty falls back to the reading granularity.
        let f = fit_overheads(&[obs("a", 700e6, false, false)], &prior).unwrap();
        assert_eq!(f.inference.value, 700e6);
        assert!(f.inference.se >= READING_GRANULARITY);
        assert!(fit_overheads(&[], &prior).is_err());
    }
}
