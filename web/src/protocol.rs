//! The messages between the page and its worker threads.
//!
//! The page sends a worker one [`Request`] as JSON ([`Request::to_json`]):
//! `kind` says what is asked (`curve`, `estimate` or `fit_rows`), `model`,
//! `workload` and `runtime` are as in a spec, and each kind adds its own
//! field (`lengths`, `length` or `margin_pct`). The worker reads it with the
//! core's spec readers ([`Request::from_json`]) and answers with text
//! ([`answer`]):
//!
//! - a curve's share and a single estimate: one line per length
//!   ([`encode_results`], read back by [`read_estimates`]);
//! - the GPU table: one line per catalog GPU, its longest length, largest
//!   batch and fewest cards per strategy ([`encode_rows`], read back by
//!   [`decode_rows`]);
//! - a request it cannot read: one line `E worker request: …`.
//!
//! Plain text keeps the page's bundle free of a second JSON reader for
//! estimates. The envelope a worker's script exchanges with the page
//! (`{id, request}` in, `{id, out}`, `{ready}` or `{failed}` out) is in
//! `workers.rs`.

use crate::curve::{estimate_lengths, PointResult};
use crate::gpu_rows::{self, FitRow};
use crate::import::read_model_json;
use headroom_core::arch::Architecture;
use headroom_core::estimate::{Component, Estimate, Share};
use headroom_core::gpus::CATALOG;
use headroom_core::parallel::Strategy;
use headroom_core::readers::{parse_runtime, parse_workload};
use headroom_core::search::OnCard;
use headroom_core::workload::Workload;
use headroom_core::{Bytes, RuntimeProfile};
use serde_json::Value;

/// What every request estimates: the model, the workload and the runtime.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    /// The model.
    pub arch: Architecture,
    /// The workload (a curve's or an estimate's length replaces its own).
    pub workload: Workload,
    /// The runtime profile.
    pub runtime: RuntimeProfile,
}

impl Inputs {
    /// Model, workload and runtime as a spec's JSON object (`model`,
    /// `workload`, `runtime`), with `fields` added.
    pub fn to_json_with(&self, fields: &[(&str, Value)]) -> String {
        let mut v = serde_json::json!({
            "model": self.arch,
            "workload": self.workload,
            "runtime": self.runtime,
        });
        if let Some(map) = v.as_object_mut() {
            for (key, value) in fields {
                map.insert((*key).into(), value.clone());
            }
        }
        v.to_string()
    }

    /// Reads [`Inputs::to_json_with`] with the core's spec readers, and
    /// gives the whole object for its other fields.
    pub fn from_json(text: &str) -> Result<(Inputs, Value), String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let arch = read_model_json(v.get("model"))
            .map_err(|e| e.to_string())?
            .arch;
        let workload = parse_workload(v.get("workload")).map_err(|e| e.to_string())?;
        let runtime =
            parse_runtime(v.get("runtime").unwrap_or(&Value::Null)).map_err(|e| e.to_string())?;
        let inputs = Inputs {
            arch,
            workload,
            runtime,
        };
        Ok((inputs, v))
    }
}

/// What the page asks a worker.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    /// A share of a curve: the estimate at each of `lengths`.
    Curve {
        /// Model, workload, runtime.
        inputs: Inputs,
        /// The lengths to estimate.
        lengths: Vec<u32>,
    },
    /// The estimate at one length (a long generation's chosen length).
    Estimate {
        /// Model, workload, runtime.
        inputs: Inputs,
        /// The length.
        length: u32,
    },
    /// The GPU table's searches (`gpu_rows::rows`) at the workload as set, with
    /// this fragmentation margin in percent.
    FitRows {
        /// Model, workload, runtime.
        inputs: Inputs,
        /// The fragmentation margin, percent.
        margin_pct: u32,
    },
}

impl Request {
    /// A curve's share. A curve is keyed with the workload at length 0,
    /// which the spec reader rejects: a valid length stands in (each point
    /// sets its own), the share's first, and images are at least 16 px.
    pub fn curve(inputs: Inputs, lengths: Vec<u32>) -> Request {
        let mut inputs = inputs;
        if let Some(&first) = lengths.first() {
            let vision = inputs.arch.is_vision();
            let stand_in = if vision { first.max(16) } else { first };
            inputs.workload = inputs.workload.with_length(vision, stand_in);
        }
        Request::Curve { inputs, lengths }
    }

    /// The key of this kind in [`Request::to_json`].
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Curve { .. } => "curve",
            Request::Estimate { .. } => "estimate",
            Request::FitRows { .. } => "fit_rows",
        }
    }

    /// Model, workload and runtime.
    pub fn inputs(&self) -> &Inputs {
        match self {
            Request::Curve { inputs, .. }
            | Request::Estimate { inputs, .. }
            | Request::FitRows { inputs, .. } => inputs,
        }
    }

    /// The request as JSON.
    pub fn to_json(&self) -> String {
        let value = match self {
            Request::Curve { lengths, .. } => ("lengths", Value::from(lengths.clone())),
            Request::Estimate { length, .. } => ("length", Value::from(*length)),
            Request::FitRows { margin_pct, .. } => ("margin_pct", Value::from(*margin_pct)),
        };
        self.inputs()
            .to_json_with(&[("kind", Value::from(self.kind())), value])
    }

    /// Reads [`Request::to_json`] with the core's spec readers (the ones
    /// the page already uses for links, configs and profiles).
    pub fn from_json(text: &str) -> Result<Request, String> {
        let (inputs, v) = Inputs::from_json(text)?;
        let length = |l: &Value| {
            l.as_u64()
                .and_then(|l| u32::try_from(l).ok())
                .ok_or("not a length")
        };
        match v.get("kind").and_then(Value::as_str) {
            Some("curve") => {
                let lengths = v
                    .get("lengths")
                    .and_then(Value::as_array)
                    .ok_or("`lengths` is missing")?
                    .iter()
                    .map(length)
                    .collect::<Result<Vec<u32>, _>>()
                    .map_err(|e| format!("`lengths`: {e}"))?;
                Ok(Request::Curve { inputs, lengths })
            }
            Some("estimate") => {
                let length = length(v.get("length").ok_or("`length` is missing")?)
                    .map_err(|e| format!("`length`: {e}"))?;
                Ok(Request::Estimate { inputs, length })
            }
            Some("fit_rows") => {
                let margin_pct =
                    v.get("margin_pct")
                        .and_then(Value::as_u64)
                        .ok_or("`margin_pct`: not a percentage")?
                        .min(u64::from(crate::defaults::MAX_MARGIN_PCT)) as u32;
                Ok(Request::FitRows { inputs, margin_pct })
            }
            other => Err(format!(
                "`kind`: `{}` is not accepted; allowed: curve, estimate or fit_rows",
                other.unwrap_or("")
            )),
        }
    }
}

/// Answers a [`Request`] given as JSON (what a worker thread runs).
pub fn answer(request: &str) -> String {
    match Request::from_json(request) {
        Ok(Request::Curve { inputs: i, lengths }) => encode_results(&estimate_lengths(
            &i.arch,
            &i.workload,
            &i.runtime,
            &lengths,
        )),
        Ok(Request::Estimate { inputs: i, length }) => encode_results(&estimate_lengths(
            &i.arch,
            &i.workload,
            &i.runtime,
            &[length],
        )),
        Ok(Request::FitRows {
            inputs: i,
            margin_pct,
        }) => encode_rows(&gpu_rows::rows(
            &i.arch,
            &i.workload,
            &i.runtime,
            None,
            margin_pct,
        )),
        Err(e) => format!("E worker request: {e}\n"),
    }
}

/// One line per outcome: `O` and the estimate's numbers (its breakdown as
/// component index and bytes), a tab, the peak op; or `E`, a space and the
/// message.
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
pub fn read_estimates(response: &str, expected: usize) -> Result<Vec<PointResult>, String> {
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
            // Curve points are replayed without a capacity: never reached.
            reached_capacity: false,
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

/// The searched half of each row (whether the job as given fits: `+`,
/// `-`, `?` when not known, or `~` and its peak on the card when it fits
/// only by PyTorch freeing its cache there; longest length, largest batch, then the
/// fewest cards per strategy as `key=value`), one line per catalog GPU,
/// tab-separated: each value `-` (none fits), a number, or `!` and the
/// core's message.
pub fn encode_rows(rows: &[FitRow]) -> String {
    let field = |v: &Result<Option<u32>, String>| match v {
        Ok(None) => "-".to_string(),
        Ok(Some(n)) => n.to_string(),
        Err(e) => format!("!{}", e.replace(['\t', '\n'], " ")),
    };
    rows.iter()
        .map(|r| {
            let fits = match (r.fits, r.releasing_cache_at) {
                (Some(true), Some(on_card)) => format!("~{on_card}"),
                (Some(true), None) => "+".into(),
                (Some(false), _) => "-".into(),
                (None, _) => "?".into(),
            };
            let mut line = format!("{fits}\t{}\t{}", field(&r.max_length), field(&r.max_batch));
            for (strategy, n) in &r.fewest {
                line.push_str(&format!("\t{}={}", strategy.key(), field(n)));
            }
            line.push('\n');
            line
        })
        .collect()
}

/// Reads [`encode_rows`] back into the table for the job's
/// `reservation` (`gpu_rows::reservation`; jobs per card need no estimate
/// beyond whether it fits).
pub fn decode_rows(text: &str, reservation: Option<Bytes>) -> Result<Vec<FitRow>, String> {
    let field = |v: &str| match v {
        "-" => Some(Ok(None)),
        _ => match v.strip_prefix('!') {
            Some(e) => Some(Err(e.to_string())),
            None => v.parse().ok().map(|n| Ok(Some(n))),
        },
    };
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() != CATALOG.len() {
        return Err("GPU table: malformed".to_string());
    }
    CATALOG
        .iter()
        .zip(lines)
        .map(|(gpu, line)| {
            let mut parts = line.split('\t');
            let (Some(fits), Some(length), Some(batch)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err("GPU table: malformed".to_string());
            };
            let on_card = match fits {
                "+" => Some(OnCard {
                    fits: true,
                    releasing_cache_at: None,
                }),
                "-" => Some(OnCard {
                    fits: false,
                    releasing_cache_at: None,
                }),
                "?" => None,
                _ => match fits.strip_prefix('~').and_then(|p| p.parse().ok()) {
                    Some(peak) => Some(OnCard {
                        fits: true,
                        releasing_cache_at: Some(peak),
                    }),
                    None => return Err("GPU table: malformed".to_string()),
                },
            };
            let (jobs, reservation) = gpu_rows::jobs(gpu, on_card, reservation);
            let fewest = parts
                .map(|part| {
                    let (key, value) = part.split_once('=')?;
                    Some((Strategy::from_key(key)?, field(value)?))
                })
                .collect::<Option<Vec<_>>>()
                .ok_or("GPU table: malformed")?;
            Ok(FitRow {
                gpu,
                max_length: field(length).ok_or("GPU table: malformed")?,
                max_batch: field(batch).ok_or("GPU table: malformed")?,
                fits: on_card.map(|o| o.fits),
                releasing_cache_at: on_card.and_then(|o| o.releasing_cache_at),
                jobs,
                reservation,
                fewest,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
