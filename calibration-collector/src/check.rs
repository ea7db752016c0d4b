//! `calibration-collector check FILE...`: predicted against measured, case by
//! case, and the summary line.

use crate::cases::{classify, predict, read_records, Classified, Prediction, Status};
use crate::error::Result;
use crate::stats::{relative_error, Summary};
use headroom_core::spec::ProcessHistory;
use headroom_core::RuntimeProfile;
use std::fmt::Write as _;

/// Options of `check`.
#[derive(Clone, Debug, Default)]
pub struct CheckArgs {
    /// Measurement files (`-` is stdin).
    pub files: Vec<String>,
    /// Only cases of this family (`decoder`, `encoder`, `vit`, `esmfold`, `cnn`) or model id.
    pub family: Option<String>,
    /// Only cases whose name contains this.
    pub filter: Option<String>,
    /// Runtime coefficients to use instead of each case's defaults.
    pub profile: Option<RuntimeProfile>,
}

/// One compared case.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// Case name.
    pub case: String,
    /// Predicted driver-level peak, bytes.
    pub predicted: u64,
    /// Measured driver-level peak, bytes.
    pub measured: u64,
    /// `(predicted - measured) / measured`.
    pub error: f64,
}

/// One skipped case.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skip {
    /// Case name.
    pub case: String,
    /// Why.
    pub reason: String,
}

/// Everything `check` found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// Compared cases, in file order.
    pub rows: Vec<Row>,
    /// Skipped cases, in file order.
    pub skipped: Vec<Skip>,
    /// The summary over `rows`.
    pub summary: Summary,
}

fn normalise(s: &str) -> String {
    s.to_ascii_lowercase().replace(['_', '-'], "")
}

/// Compares every case of the files.
pub fn compare(args: &CheckArgs) -> Result<Report> {
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for file in &args.files {
        let mut history = ProcessHistory::default();
        for record in read_records(file)? {
            let case = match classify(&record)? {
                Classified::Overheads => continue,
                Classified::Case(c) => c,
            };
            let skip = |reason: String| Skip {
                case: case.name.clone(),
                reason,
            };
            // Every case of the file goes through the history, filtered or not.
            let prediction = predict(&case, args.profile.as_ref(), &mut history)?;
            if let Some(f) = &args.filter {
                if !case.name.contains(f.as_str()) {
                    continue;
                }
            }
            if let Some(family) = &args.family {
                let wanted = normalise(family);
                let matches = match &prediction {
                    Prediction::Predicted { spec, .. } => {
                        normalise(spec.model.arch.family()) == wanted
                            || normalise(&spec.model.id) == wanted
                    }
                    // Not modelled yet: the preset's family, or the model id.
                    Prediction::Skipped(_) => case
                        .value
                        .get("model")
                        .and_then(|m| m.as_str())
                        .is_some_and(|id| {
                            normalise(id) == wanted
                                || headroom_core::presets::find(id)
                                    .is_ok_and(|p| normalise(p.arch.family()) == wanted)
                        }),
                };
                if !matches {
                    continue;
                }
            }
            match case.status {
                Status::Oom => {
                    skipped.push(skip("measured out of memory".into()));
                    continue;
                }
                Status::Failed => {
                    skipped.push(skip("the measurement failed".into()));
                    continue;
                }
                Status::Ok => {}
            }
            match prediction {
                Prediction::Skipped(reason) => skipped.push(skip(reason)),
                Prediction::Predicted { estimate, .. } => {
                    let measured = case.driver_peak.expect("checked by classify");
                    let predicted = estimate.driver_peak.0;
                    rows.push(Row {
                        case: case.name.clone(),
                        predicted,
                        measured,
                        error: relative_error(predicted, measured),
                    });
                }
            }
        }
    }
    let errors: Vec<f64> = rows.iter().map(|r| r.error).collect();
    Ok(Report {
        rows,
        skipped,
        summary: Summary::of(&errors),
    })
}

/// The text report: a header, one line per case, the summary line last.
pub fn render(report: &Report) -> String {
    let width = report
        .rows
        .iter()
        .map(|r| r.case.len())
        .chain(report.skipped.iter().map(|s| s.case.len()))
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# {:<w$} {:>12} {:>12} {:>7}   (driver-level peak; error = (predicted - measured) / measured)",
        "case",
        "predicted",
        "measured",
        "error",
        w = width.saturating_sub(2)
    );
    for r in &report.rows {
        let _ = writeln!(
            out,
            "{:<width$} {:>10.3}GB {:>10.3}GB {:>+6.1}%",
            r.case,
            r.predicted as f64 / 1e9,
            r.measured as f64 / 1e9,
            r.error * 100.0
        );
    }
    for s in &report.skipped {
        let _ = writeln!(out, "{:<width$} skipped: {}", s.case, s.reason);
    }
    let _ = writeln!(out, "{}", report.summary);
    out
}
