//! `headroom check FILE...`: predicted against measured, case by
//! case, and the summary line.

use crate::cases::{
    classify, predict, read_records, refuse_repeated_files, Classified, Prediction, Status,
};
use crate::error::{CollectorError, Result};
use crate::profile;
use crate::stats::{relative_error, Summary};
use headroom_core::parallel::Strategy;
use headroom_core::readers::ProcessHistory;
use headroom_core::uncertainty::{likely_range, LikelyRange};
use headroom_core::workload::Mode;
use headroom_core::RuntimeProfile;
use std::fmt::Write as _;

/// Options of `check` (its command-line flags).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CheckArgs {
    /// Measurement files (JSON lines in the measurement format of docs/spec.md, or profiles).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Only cases of this family (decoder, encoder, vit, esmfold, cnn) or model id;
    /// any other value is refused.
    #[arg(long)]
    pub family: Option<String>,
    /// Only cases whose name contains this substring.
    #[arg(long)]
    pub filter: Option<String>,
    /// Use this calibration profile's runtime coefficients instead of the defaults.
    #[arg(long)]
    pub profile: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the report as a Markdown document: per file, the summary of all its
    /// cases and of each family, then every case.
    #[arg(long)]
    pub markdown: bool,
    /// Print the lowest and highest error of each family, mode and strategy as
    /// the core's error-band table (what `scripts/error-bands.sh` writes).
    #[arg(long)]
    pub bands: bool,
}

/// Runs `check`: the report as text, JSON or Markdown.
pub fn run(args: &CheckArgs) -> Result<String> {
    if usize::from(args.json) + usize::from(args.markdown) + usize::from(args.bands) > 1 {
        return Err(CollectorError::input(
            "--json, --markdown and --bands: pick one; allowed: one of them or none (text)",
        ));
    }
    let profile = args.profile.as_deref().map(load_runtime).transpose()?;
    let report = compare(args, profile.as_ref())?;
    Ok(if args.json {
        serde_json::to_string_pretty(&report).expect("report serialises") + "\n"
    } else if args.markdown {
        markdown(&report, &args.files)
    } else if args.bands {
        bands_source(&report, &args.files)
    } else {
        render(&report)
    })
}

/// `--profile`: a calibration profile, or any object with `runtime`, or a
/// bare runtime object.
pub fn load_runtime(path: &str) -> Result<RuntimeProfile> {
    let text = profile::read_text(path)?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| CollectorError::input(format!("{path}: malformed JSON: {e}")))?;
    if value.get("schema_version").is_some() {
        let p = profile::from_value(&value, &profile::Identity::default())
            .map_err(|e| CollectorError::input(format!("{path}: {e}")))?;
        return Ok(p.runtime);
    }
    let runtime = value.get("runtime").unwrap_or(&value);
    headroom_core::readers::parse_runtime(runtime)
        .map_err(|e| CollectorError::input(format!("{path}: {e}")))
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
    /// The file it came from, as named on the command line.
    #[serde(skip)]
    pub file: String,
    /// The model's family (`decoder`, `encoder`, `vit`, `esm_fold`, `cnn`).
    #[serde(skip)]
    pub family: &'static str,
    /// The family key of its error band (`band_family`: the family, or
    /// `cnn_channels_last`).
    pub band_family: &'static str,
    /// Inference or training.
    #[serde(skip)]
    pub mode: Mode,
    /// How the job was spread over GPUs.
    #[serde(skip)]
    pub strategy: Strategy,
    /// The likely range of the prediction ([`headroom_core::uncertainty`]).
    #[serde(skip)]
    pub range: LikelyRange,
}

/// One skipped case.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Skip {
    /// Case name.
    pub case: String,
    /// Why.
    pub reason: String,
    /// The file it came from, as named on the command line.
    #[serde(skip)]
    pub file: String,
}

/// Everything `check` found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// Compared cases, in file order.
    pub rows: Vec<Row>,
    /// Skipped cases, in file order.
    pub skipped: Vec<Skip>,
    /// How often the measured peak lies in the likely range.
    pub range: RangeCoverage,
    /// The summary over `rows`.
    pub summary: Summary,
}

/// How the likely ranges ([`headroom_core::uncertainty`]) fared.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct RangeCoverage {
    /// Cases whose measured peak lies in the range.
    pub inside: usize,
    /// Cases compared.
    pub cases: usize,
    /// Median over the cases of the range's half-width, against the prediction.
    pub median_half_width: f64,
}

impl RangeCoverage {
    /// Over the compared rows.
    pub fn of(rows: &[Row]) -> RangeCoverage {
        let inside = rows.iter().filter(|r| r.range.contains(r.measured)).count();
        let mut widths: Vec<f64> = rows
            .iter()
            .map(|r| r.range.half_width(headroom_core::Bytes(r.predicted)))
            .collect();
        widths.sort_by(f64::total_cmp);
        let median_half_width = match widths.len() {
            0 => 0.0,
            n if n % 2 == 1 => widths[n / 2],
            n => (widths[n / 2 - 1] + widths[n / 2]) / 2.0,
        };
        RangeCoverage {
            inside,
            cases: rows.len(),
            median_half_width,
        }
    }
}

impl std::fmt::Display for RangeCoverage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "# likely range: {} of {} measured peaks inside ({:.1}%); median half-width {:.1}%",
            self.inside,
            self.cases,
            100.0 * self.inside as f64 / self.cases.max(1) as f64,
            100.0 * self.median_half_width
        )
    }
}

fn normalise(s: &str) -> String {
    s.to_ascii_lowercase().replace(['_', '-'], "")
}

/// The family keys `--family` takes (besides a case's model id); `esm_fold`
/// is the same key as `esmfold`.
pub const FAMILIES: [&str; 5] = ["decoder", "encoder", "vit", "esmfold", "cnn"];

/// Compares every case of the files, with `profile`'s runtime coefficients
/// when given. Each file is one process history: a case that ran after an
/// earlier case of its file in the same process is replayed after it.
///
/// Refuses to check nothing: a file without a case (empty, or only the
/// `runtime_overheads` line), filters that select no case, an unknown
/// `--family`, a file given twice, and a case name that appears more than
/// once (the report would not say which measurement a row is).
pub fn compare(args: &CheckArgs, profile: Option<&RuntimeProfile>) -> Result<Report> {
    refuse_repeated_files("check", &args.files)?;
    let wanted = args.family.as_deref().map(normalise);
    let family_is_key = wanted
        .as_deref()
        .is_some_and(|w| FAMILIES.iter().any(|k| normalise(k) == w));
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let mut names = crate::cases::CaseNames::default();
    let mut without_cases: Vec<String> = Vec::new();
    let (mut cases, mut family_hits, mut selected) = (0usize, 0usize, 0usize);
    let mut progress =
        crate::progress::Counted::new(0, "{bar:30} {pos}/{len} cases [{elapsed} < {eta}]");
    for file in &args.files {
        let mut history = ProcessHistory::default();
        let mut records = 0usize;
        let mut cases_here = 0usize;
        let file_records = read_records(file)?;
        progress.add(file_records.len() as u64);
        for record in file_records {
            progress.inc();
            records += 1;
            let case = match classify(&record)? {
                Classified::Overheads => continue,
                Classified::Case(c) => c,
            };
            cases_here += 1;
            names.add(&case.name, &case.origin);
            let skip = |reason: String| Skip {
                case: case.name.clone(),
                reason,
                file: file.clone(),
            };
            // Every case of the file goes through the history, filtered or not.
            let prediction = predict(&case, profile, &mut history)?;
            let family_ok = match &wanted {
                None => true,
                Some(wanted) => match &prediction {
                    Prediction::Predicted { spec, .. } => {
                        normalise(spec.model.arch.family()) == *wanted
                            || normalise(&spec.model.id) == *wanted
                    }
                    // Not modelled yet: the preset's family, or the model id.
                    Prediction::Skipped(_) => case
                        .value
                        .get("model")
                        .and_then(|m| m.as_str())
                        .is_some_and(|id| {
                            normalise(id) == *wanted
                                || headroom_core::presets::find(id)
                                    .is_ok_and(|p| normalise(p.arch.family()) == *wanted)
                        }),
                },
            };
            family_hits += usize::from(family_ok);
            let filter_ok = args.filter.as_deref().is_none_or(|f| case.name.contains(f));
            if !(family_ok && filter_ok) {
                continue;
            }
            selected += 1;
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
                Prediction::Predicted { estimate, spec } => {
                    let measured = case.driver_peak.expect("checked by classify");
                    let predicted = estimate.driver_peak.0;
                    let (arch, w) = (&spec.model.arch, &spec.workload);
                    rows.push(Row {
                        case: case.name.clone(),
                        predicted,
                        measured,
                        error: relative_error(predicted, measured),
                        file: file.clone(),
                        family: arch.family(),
                        band_family: headroom_core::uncertainty::band_family(arch, w),
                        mode: w.mode,
                        strategy: w.parallel.strategy,
                        // The measurements are the H200's, whose overheads
                        // are measured; a profile measures its own card's.
                        range: likely_range(
                            arch,
                            w,
                            estimate.driver_peak,
                            estimate.outside_allocator,
                            true,
                        ),
                    });
                }
            }
        }
        cases += cases_here;
        if cases_here == 0 {
            without_cases.push(if records == 0 {
                format!("{file}: no measurement case (the file is empty)")
            } else {
                format!(
                    "{file}: no measurement case (only the `runtime_overheads` line, which is not a case)"
                )
            });
        }
    }
    progress.finish();
    if !without_cases.is_empty() {
        return Err(CollectorError::input(format!(
            "nothing to check: {}; allowed: files with at least one measurement case (docs/spec.md)",
            without_cases.join("; ")
        )));
    }
    names.refuse_duplicates(&args.files)?;
    if let Some(family) = &args.family {
        if !family_is_key && family_hits == 0 {
            return Err(CollectorError::input(format!(
                "--family {family}: not a family, nor the model id of any case in {}; allowed: {} or a case's model id",
                args.files.join(", "),
                FAMILIES.join(", ")
            )));
        }
    }
    if selected == 0 {
        let mut given = Vec::new();
        if let Some(f) = &args.family {
            given.push(format!("--family {f}"));
        }
        if let Some(f) = &args.filter {
            given.push(format!("--filter {f}"));
        }
        return Err(CollectorError::input(format!(
            "nothing to check: {} matched none of the {cases} case(s) in {}",
            given.join(" with "),
            args.files.join(", ")
        )));
    }
    let errors: Vec<f64> = rows.iter().map(|r| r.error).collect();
    Ok(Report {
        range: RangeCoverage::of(&rows),
        rows,
        skipped,
        summary: Summary::of(&errors),
    })
}

/// The text report: a header, one line per case, the likely range's
/// coverage (a `#` line, like the header), the summary line last.
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
    let _ = writeln!(out, "{}", report.range);
    let _ = writeln!(out, "{}", report.summary);
    out
}

/// `|error|` as a percentage with one decimal.
fn pct(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// `worst under`: the most negative error and its case, or `none`.
fn worst_under(rows: &[&Row]) -> String {
    rows.iter()
        .filter(|r| r.error < 0.0)
        .min_by(|a, b| a.error.total_cmp(&b.error))
        .map_or_else(
            || "none".to_string(),
            |r| format!("{:+.1}% (`{}`)", r.error * 100.0, r.case),
        )
}

/// One row of a summary table: the set's name and its figures.
fn summary_row(out: &mut String, set: &str, rows: &[&Row]) {
    let errors: Vec<f64> = rows.iter().map(|r| r.error).collect();
    let s = Summary::of(&errors);
    let _ = writeln!(
        out,
        "| {set} | {} | {} | {} | {} | {} | {} |",
        s.cases,
        pct(s.median_abs_err),
        pct(s.p90_abs_err),
        pct(s.max_abs_err),
        s.under_5pct,
        worst_under(rows)
    );
}

const SUMMARY_HEADER: &str = "| set | cases | median | p90 | max abs error | under >5% | worst under |\n|---|---:|---:|---:|---:|---:|---|\n";

/// The Markdown report: every file's summary together, then per file the
/// summary of all its cases and of each family, its skipped cases, and every
/// case. `files` are the files in the order given on the command line.
pub fn markdown(report: &Report, files: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Accuracy of the predicted peak\n");
    let _ = writeln!(
        out,
        "Generated from measured data by `headroom check --markdown`; do not edit by hand. \
         Each case compares the predicted driver-level peak (what `nvidia-smi` shows) with the measured one: \
         error = (predicted - measured) / measured. `median`, `p90` (nearest rank) and `max abs error` are \
         over |error|; `under >5%` counts cases predicted more than 5% below their measurement (an \
         under-estimate is an out-of-memory error); `worst under` is the most negative error. A file is one \
         measurement run: a case that ran in a process after an earlier case of its file is predicted after \
         that case.\n"
    );
    let _ = writeln!(out, "## Summary\n");
    out.push_str(
        "| file | cases | median | p90 | max abs error | under >5% | worst under |\n|---|---:|---:|---:|---:|---:|---|\n",
    );
    let of_file =
        |file: &str| -> Vec<&Row> { report.rows.iter().filter(|r| r.file == file).collect() };
    for file in files {
        summary_row(&mut out, &format!("`{file}`"), &of_file(file));
    }
    let all: Vec<&Row> = report.rows.iter().collect();
    summary_row(&mut out, "all files", &all);
    for file in files {
        let rows = of_file(file);
        let _ = writeln!(out, "\n## `{file}`\n");
        out.push_str(SUMMARY_HEADER);
        summary_row(&mut out, "all", &rows);
        let mut families: Vec<&str> = Vec::new();
        for r in &rows {
            if !families.contains(&r.family) {
                families.push(r.family);
            }
        }
        for family in families {
            let of_family: Vec<&Row> = rows
                .iter()
                .copied()
                .filter(|r| r.family == family)
                .collect();
            summary_row(&mut out, family, &of_family);
        }
        let skipped: Vec<&Skip> = report.skipped.iter().filter(|s| s.file == *file).collect();
        if !skipped.is_empty() {
            let _ = writeln!(out, "\nSkipped:\n");
            for s in skipped {
                let _ = writeln!(out, "- `{}`: {}", s.case, s.reason);
            }
        }
        if !rows.is_empty() {
            let _ = writeln!(out, "\n<details><summary>Every case</summary>\n");
            out.push_str(
                "| case | family | predicted | measured | error |\n|---|---|---:|---:|---:|\n",
            );
            for r in &rows {
                let _ = writeln!(
                    out,
                    "| `{}` | {} | {:.3} GB | {:.3} GB | {:+.1}% |",
                    r.case,
                    r.family,
                    r.predicted as f64 / 1e9,
                    r.measured as f64 / 1e9,
                    r.error * 100.0
                );
            }
            let _ = writeln!(out, "\n</details>");
        }
    }
    out
}

/// The core's error-band table (`core/src/uncertainty/measured.rs`): the
/// lowest and highest error of each family, mode and strategy among the
/// compared cases (the central 95% of groups of 40 cases or more), and
/// over every case (`"any"`), as Rust source.
pub fn bands_source(report: &Report, files: &[String]) -> String {
    let mut groups: Vec<(&'static str, Mode, Strategy, Vec<f64>)> = Vec::new();
    for r in &report.rows {
        for family in [r.band_family, "any"] {
            let strategy = if family == "any" {
                Strategy::None
            } else {
                r.strategy
            };
            let mode = r.mode;
            match groups
                .iter_mut()
                .find(|g| g.0 == family && g.1 == mode && g.2 == strategy)
            {
                Some(g) => g.3.push(r.error),
                None => groups.push((family, mode, strategy, vec![r.error])),
            }
        }
    }
    groups.sort_by_key(|g| (g.0, g.1.key(), g.2.key()));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "//! The errors measured for each kind of job: generated by\n//! `scripts/error-bands.sh` (`headroom check --bands`) from the\n//! measurement files of `scripts/accuracy-files.txt`; do not edit.\n//! Files: {}.\n\nuse super::ErrorBand;\nuse crate::parallel::Strategy;\nuse crate::workload::Mode;\n\n/// Lowest and highest `(predicted - measured) / measured` of each family,\n/// mode and strategy; `\"any\"` is every case of a mode.\npub const MEASURED_BANDS: &[ErrorBand] = &[",
        files.len()
    );
    let variant = |m: Mode| match m {
        Mode::Inference => "Inference",
        Mode::Training => "Training",
    };
    let strategy_variant = |s: Strategy| match s {
        Strategy::None => "None",
        Strategy::Ddp => "Ddp",
        Strategy::Fsdp2 => "Fsdp2",
        Strategy::Zero1 => "Zero1",
        Strategy::Tp => "Tp",
    };
    for (family, mode, strategy, errors) in &mut groups {
        // The central 95% of the errors: a group of 40 cases or more sets
        // aside its most extreme 2.5% at each end (the range's coverage,
        // which `check` prints, is then about 95% rather than all by
        // construction); a smaller group keeps its extremes.
        errors.sort_by(f64::total_cmp);
        let set_aside = errors.len() * 25 / 1000;
        let lowest = errors[set_aside];
        let highest = errors[errors.len() - 1 - set_aside];
        let _ = writeln!(
            out,
            "    ErrorBand {{\n        family: \"{family}\",\n        mode: Mode::{},\n        strategy: Strategy::{},\n        cases: {},\n        lowest: {:.4},\n        highest: {:.4},\n    }},",
            variant(*mode),
            strategy_variant(*strategy),
            errors.len(),
            (lowest * 1e4).floor() / 1e4,
            (highest * 1e4).ceil() / 1e4,
        );
    }
    out.push_str("];\n");
    out
}
