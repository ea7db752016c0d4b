//! Measurement cases (the measurement format, docs/spec.md): reading
//! files line by line, and predicting one case with the core.

use crate::error::{CollectorError, Result};
use headroom_core::estimate::Estimate;
use headroom_core::readers::{ProcessHistory, Spec};
use headroom_core::{Error as CoreError, RuntimeProfile};
use serde_json::Value;
use std::fmt;
use std::io::Read;

/// Where a record came from: file and 1-based line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The file as named on the command line (`-` is stdin).
    pub file: String,
    /// 1-based line number; 0 for an element of a JSON array (named in `file`).
    pub line: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.file)
        } else {
            write!(f, "{}:{}", self.file, self.line)
        }
    }
}

/// One JSON object read from a measurement file.
#[derive(Clone, Debug)]
pub struct Record {
    /// Where it came from.
    pub origin: Origin,
    /// The object.
    pub value: Value,
}

/// Largest spec `estimate`, `gpus` and `run --spec` read: 4 MiB (a spec
/// with a pasted `config.json` is a few kilobytes).
pub const MAX_SPEC_BYTES: u64 = 4 << 20;
/// Largest measurement file `check` and `fit` read: 256 MiB (about 400,000
/// cases; the committed sets are under 1 MiB each).
pub const MAX_MEASUREMENT_FILE_BYTES: u64 = 256 << 20;
/// Largest line of a measurement file: 1 MiB (a case is under 2 KB).
pub const MAX_CASE_LINE_BYTES: usize = 1 << 20;
/// Most cases one measurement file may hold (the largest committed file
/// holds a few hundred): a file of a hundred million empty objects is
/// refused after this many, never held whole.
pub const MAX_CASES_PER_FILE: usize = 100_000;

/// Reads a spec file, or stdin for `-`, refusing more than
/// [`MAX_SPEC_BYTES`].
pub fn read_text(path: &str) -> Result<String> {
    read_limited(path, MAX_SPEC_BYTES, "a spec")
}

/// Reads a whole file, or stdin for `-`, refusing more than `limit` bytes
/// (`what` names the kind of file in the error): a regular file by its size
/// before reading, a pipe, a device or stdin by reading at most one byte
/// over the limit, so neither a huge file nor `/dev/urandom` is read into
/// memory. Text that is not UTF-8 is refused too.
pub fn read_limited(path: &str, limit: u64, what: &str) -> Result<String> {
    let name = if path == "-" { "(stdin)" } else { path };
    let too_large = |size: &str| {
        CollectorError::input(format!(
            "{name}: {size}; allowed: {what} of at most {limit} bytes ({} MiB)",
            limit >> 20
        ))
    };
    let not_text = |offset: usize| {
        CollectorError::input(format!(
            "{name}: not UTF-8 text (invalid byte at offset {offset}); allowed: {what} as JSON text"
        ))
    };
    let mut reader: Box<dyn Read> = if path == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| CollectorError::io(path, e))?;
        let meta = file.metadata().map_err(|e| CollectorError::io(path, e))?;
        if meta.is_file() && meta.len() > limit {
            return Err(too_large(&format!("the file is {} bytes", meta.len())));
        }
        Box::new(file)
    };
    // In chunks, the text checked as it comes: binary input (a device, an
    // image) is refused at its first invalid byte, not read to the limit.
    let mut bytes = Vec::new();
    let mut valid = 0;
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CollectorError::io(name, e)),
        };
        bytes.extend_from_slice(&chunk[..n]);
        if bytes.len() as u64 > limit {
            return Err(too_large(&format!(
                "more than {limit} bytes (reading stopped there)"
            )));
        }
        match std::str::from_utf8(&bytes[valid..]) {
            Ok(_) => valid = bytes.len(),
            // A character cut at the chunk's end: checked with the next one.
            Err(e) if e.error_len().is_none() => valid += e.valid_up_to(),
            Err(e) => return Err(not_text(valid + e.valid_up_to())),
        }
    }
    String::from_utf8(bytes).map_err(|e| not_text(e.utf8_error().valid_up_to()))
}

/// Reads measurement records: JSON lines (blank lines and `#` comments
/// skipped), a JSON array of cases, or a calibration profile (its `points`).
pub fn read_records(path: &str) -> Result<Vec<Record>> {
    let text = read_limited(path, MAX_MEASUREMENT_FILE_BYTES, "a measurement file")?;
    parse_records(path, &text)
}

/// [`read_records`] on text already read.
pub fn parse_records(file: &str, text: &str) -> Result<Vec<Record>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        // Element by element: a non-object or one case too many stops the
        // read there, before the rest of the array is built.
        let mut out = Vec::new();
        let mut de = serde_json::Deserializer::from_str(text);
        let read = serde::de::DeserializeSeed::deserialize(
            ArrayOfCases {
                file,
                out: &mut out,
            },
            &mut de,
        )
        .and_then(|()| de.end());
        match read {
            Ok(()) => return Ok(out),
            Err(e) if e.is_data() => return Err(CollectorError::input(format!("{file}{e}"))),
            // Not JSON: read as lines below, which names the line.
            Err(_) => {}
        }
    }
    if looks_like_profile(trimmed) {
        if let Ok(doc) = serde_json::from_str::<Value>(text) {
            let items = match doc {
                Value::Array(items) => items,
                Value::Object(mut map) => match map.remove("points") {
                    Some(Value::Array(items)) => items,
                    _ => {
                        return Err(CollectorError::input(format!(
                            "{file}: `points` is missing; allowed: a JSON-lines file of measurement cases, a JSON array of cases, or a calibration profile with `points`"
                        )))
                    }
                },
                _ => unreachable!("checked by the first character"),
            };
            let mut out = Vec::with_capacity(items.len());
            for (i, value) in items.into_iter().enumerate() {
                let origin = Origin {
                    file: format!("{file}[{i}]"),
                    line: 0,
                };
                if !value.is_object() {
                    return Err(not_an_object(&origin));
                }
                out.push(Record { origin, value });
            }
            return Ok(out);
        }
    }
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let origin = Origin {
            file: file.to_string(),
            line: index + 1,
        };
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if out.len() == MAX_CASES_PER_FILE {
            return Err(too_many_cases(&origin.to_string()));
        }
        if line.len() > MAX_CASE_LINE_BYTES {
            return Err(CollectorError::input(format!(
                "{origin}: the line is {} bytes; allowed: a case of at most {MAX_CASE_LINE_BYTES} bytes (1 MiB) per line",
                line.len()
            )));
        }
        let value = headroom_core::readers::json::parse(line)
            .map_err(|e| CollectorError::input(format!("{origin}: {e}")))?;
        if !value.is_object() {
            return Err(not_an_object(&origin));
        }
        out.push(Record { origin, value });
    }
    Ok(out)
}

/// Refuses a file named twice on `command`'s command line (the same path,
/// however spelt, or `-` twice): its cases would count twice.
pub fn refuse_repeated_files(command: &str, files: &[String]) -> Result<()> {
    let key = |f: &str| {
        if f == "-" {
            std::path::PathBuf::from(f)
        } else {
            std::fs::canonicalize(f).unwrap_or_else(|_| std::path::PathBuf::from(f))
        }
    };
    for (i, file) in files.iter().enumerate() {
        if let Some(earlier) = files[..i].iter().find(|e| key(e) == key(file)) {
            let same = if earlier == file {
                format!("{file} is given twice")
            } else {
                format!("{file} is the same file as {earlier}")
            };
            return Err(CollectorError::input(format!(
                "{command}: {same}; allowed: each measurement file once (its cases would count twice)"
            )));
        }
    }
    Ok(())
}

fn too_many_cases(at: &str) -> CollectorError {
    CollectorError::input(format!(
        "{at}: more than {MAX_CASES_PER_FILE} cases; allowed: at most {MAX_CASES_PER_FILE} measurement cases per file (split it)"
    ))
}

/// A JSON array of cases, read one element at a time into `out`.
struct ArrayOfCases<'a> {
    file: &'a str,
    out: &'a mut Vec<Record>,
}

impl<'de> serde::de::DeserializeSeed<'de> for ArrayOfCases<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ArrayOfCases<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of measurement cases")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<(), A::Error> {
        use serde::de::Error;
        while let Some(value) = seq.next_element::<Value>()? {
            let i = self.out.len();
            let origin = Origin {
                file: format!("{}[{i}]", self.file),
                line: 0,
            };
            if i == MAX_CASES_PER_FILE {
                return Err(A::Error::custom(format_args!(
                    "[{i}]: more than {MAX_CASES_PER_FILE} cases; allowed: at most {MAX_CASES_PER_FILE} measurement cases per file (split it)"
                )));
            }
            if !value.is_object() {
                return Err(A::Error::custom(format_args!(
                    "[{i}]: not a JSON object; allowed: one measurement case object per element"
                )));
            }
            self.out.push(Record { origin, value });
        }
        Ok(())
    }
}

fn not_an_object(origin: &Origin) -> CollectorError {
    CollectorError::input(format!(
        "{origin}: not a JSON object; allowed: one measurement case object per line"
    ))
}

fn looks_like_profile(text: &str) -> bool {
    text.starts_with('{') && text.contains("\"schema_version\"") && text.contains("\"points\"")
}

/// How a measured case ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The job finished; the peak is measured.
    Ok,
    /// The job ran out of memory: the peak is at least the card's capacity.
    Oom,
    /// The job failed for another reason.
    Failed,
}

/// What a record is.
#[derive(Clone, Debug)]
pub enum Classified {
    /// The `runtime_overheads` line: not a case.
    Overheads,
    /// A case.
    Case(MeasuredCase),
}

/// A measurement case's figures.
#[derive(Clone, Debug)]
pub struct MeasuredCase {
    /// Where it came from.
    pub origin: Origin,
    /// `case`.
    pub name: String,
    /// `measured.status` (absent means `ok`; `measured.oom: true` means `oom`).
    pub status: Status,
    /// `measured.driver_peak` (required for `ok` cases).
    pub driver_peak: Option<u64>,
    /// `measured.reserved_peak`, when recorded.
    pub reserved_peak: Option<u64>,
    /// `measured.alloc_peak`, when recorded.
    pub alloc_peak: Option<u64>,
    /// The whole object.
    pub value: Value,
}

/// Classifies a record, checking the fields `check` and `fit` need.
pub fn classify(record: &Record) -> Result<Classified> {
    let origin = &record.origin;
    let value = &record.value;
    let name = match value.get("case") {
        Some(Value::String(s)) if s == "runtime_overheads" => return Ok(Classified::Overheads),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(_) => {
            return Err(CollectorError::input(format!(
                "{origin}: `case` has the wrong type; allowed: a non-empty string naming the case"
            )))
        }
        None => {
            return Err(CollectorError::input(format!(
                "{origin}: `case` is missing; allowed: a non-empty string naming the case"
            )))
        }
    };
    let measured = match value.get("measured") {
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(CollectorError::input(format!(
                "{origin} (case {name}): `measured` is not an object; allowed: an object with driver_peak, reserved_peak, alloc_peak (bytes)"
            )))
        }
        None => {
            return Err(CollectorError::input(format!(
                "{origin} (case {name}): `measured` is missing; allowed: an object with driver_peak, reserved_peak, alloc_peak (bytes)"
            )))
        }
    };
    let bytes = |key: &str| -> Result<Option<u64>> {
        match measured.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                CollectorError::input(format!(
                    "{origin} (case {name}): `measured.{key}` is {v}; allowed: a whole number of bytes from 0 to 2^64-1"
                ))
            }),
        }
    };
    let mut status = match measured.get("status") {
        None | Some(Value::Null) => Status::Ok,
        Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
            CollectorError::input(format!(
                "{origin} (case {name}): `measured.status` is {v}; allowed: \"ok\", \"oom\" or \"failed\""
            ))
        })?,
    };
    if measured.get("oom") == Some(&Value::Bool(true)) {
        status = Status::Oom;
    } else if measured.contains_key("error") || measured.contains_key("unsupported") {
        // The harness's failures: the job raised (`error`, its peaks only
        // as far as it got) or could not be built (`unsupported`).
        status = Status::Failed;
    }
    let driver_peak = bytes("driver_peak")?;
    if status == Status::Ok {
        match driver_peak {
            None => {
                return Err(CollectorError::input(format!(
                    "{origin} (case {name}): `measured.driver_peak` is missing; allowed: bytes from 1 to 2^64-1"
                )))
            }
            Some(0) => {
                return Err(CollectorError::input(format!(
                    "{origin} (case {name}): `measured.driver_peak` must not be 0; allowed: bytes from 1 to 2^64-1"
                )))
            }
            Some(_) => {}
        }
    }
    let reserved_peak = bytes("reserved_peak")?;
    let alloc_peak = bytes("alloc_peak")?;
    Ok(Classified::Case(MeasuredCase {
        origin: origin.clone(),
        name,
        status,
        driver_peak,
        reserved_peak,
        alloc_peak,
        value: value.clone(),
    }))
}

/// The outcome of predicting one case.
#[derive(Clone, Debug)]
pub enum Prediction {
    /// The core predicted it.
    Predicted {
        /// The parsed spec (its runtime already overridden).
        spec: Box<Spec>,
        /// The estimate.
        estimate: Box<Estimate>,
    },
    /// The core does not model it (yet), or the case has no model.
    Skipped(String),
}

/// Predicts a case's `model` + `workload` + `runtime`, with the runtime's
/// coefficients replaced by `profile` when given. `Unsupported` from the core
/// is a skip; any other core error is bad input naming the case.
///
/// `history` carries the process history of the file being read (see
/// `headroom_core::readers::ProcessHistory`): a training case that starts with
/// an earlier case's optimizer state is estimated after that case.
pub fn predict(
    case: &MeasuredCase,
    profile: Option<&RuntimeProfile>,
    history: &mut ProcessHistory,
) -> Result<Prediction> {
    if case.value.get("model").is_none_or(Value::is_null) {
        return Ok(Prediction::Skipped(
            "no `model`: a measurement of a user's own job (--cmd without --spec)".into(),
        ));
    }
    let fail = |e: CoreError| -> Result<Prediction> {
        match e {
            CoreError::Unsupported { .. } => Ok(Prediction::Skipped(e.to_string())),
            e => Err(CollectorError::input(format!(
                "{} (case {}): {e}",
                case.origin, case.name
            ))),
        }
    };
    let mut spec = match Spec::from_value(&case.value) {
        Ok(spec) => spec,
        Err(e) => return fail(e),
    };
    if let Some(profile) = profile {
        spec.runtime = apply_profile(&spec.runtime, profile);
    }
    let result = headroom_core::readers::estimate_as_measured(&case.value, &mut spec, history);
    match result {
        Ok(est) => Ok(Prediction::Predicted {
            spec: Box::new(spec),
            estimate: Box::new(est),
        }),
        Err(e) => fail(e),
    }
}

pub use headroom_core::calibration::apply_profile;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_skips_blank_and_comment_lines_and_names_bad_lines() {
        let recs = parse_records("f.jsonl", "\n# c\n{\"case\": \"a\"}\n").unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].origin.to_string(), "f.jsonl:3");
        let err = parse_records("f.jsonl", "{\"case\": \"a\"}\n{oops\n").unwrap_err();
        assert!(
            err.to_string().starts_with("f.jsonl:2: malformed JSON"),
            "{err}"
        );
        let err = parse_records("f.jsonl", "[1]\n").unwrap_err();
        assert!(
            err.to_string().contains("f.jsonl[0]: not a JSON object"),
            "{err}"
        );
        let err = parse_records("f.jsonl", "{\"case\": 1}\n2\n").unwrap_err();
        assert!(
            err.to_string().contains("f.jsonl:2: not a JSON object"),
            "{err}"
        );
    }

    #[test]
    fn classify_names_the_field() {
        let rec = |s: &str| Record {
            origin: Origin {
                file: "m.jsonl".into(),
                line: 7,
            },
            value: serde_json::from_str(s).unwrap(),
        };
        let err = classify(&rec(r#"{"case": "x", "measured": {"driver_peak": -1}}"#)).unwrap_err();
        assert!(
            err.to_string()
                .contains("m.jsonl:7 (case x): `measured.driver_peak`"),
            "{err}"
        );
        let err = classify(&rec(r#"{"measured": {}}"#)).unwrap_err();
        assert!(err.to_string().contains("`case` is missing"), "{err}");
        assert!(matches!(
            classify(&rec(r#"{"case": "runtime_overheads", "measured": {}}"#)).unwrap(),
            Classified::Overheads
        ));
        match classify(&rec(r#"{"case": "x", "measured": {"oom": true}}"#)).unwrap() {
            Classified::Case(c) => assert_eq!(c.status, Status::Oom),
            _ => panic!(),
        }
    }
}

/// The case names seen across a command's files, in first-seen order, with
/// where each appeared: `check` and `fit` refuse a name seen twice (a row
/// would not say which measurement it is; a profile fitted on it would
/// then fail `check`).
#[derive(Debug, Default)]
pub struct CaseNames {
    seen: Vec<(String, Vec<Origin>)>,
    index: std::collections::HashMap<String, usize>,
}

impl CaseNames {
    /// Records `name` at `origin`.
    pub fn add(&mut self, name: &str, origin: &Origin) {
        match self.index.get(name) {
            Some(&i) => self.seen[i].1.push(origin.clone()),
            None => {
                self.index.insert(name.to_string(), self.seen.len());
                self.seen.push((name.to_string(), vec![origin.clone()]));
            }
        }
    }

    /// The error for names seen more than once in `files`, if any.
    pub fn refuse_duplicates(&self, files: &[String]) -> Result<()> {
        let duplicates: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, origins)| origins.len() > 1)
            .map(|(name, origins)| {
                let at: Vec<String> = origins.iter().map(ToString::to_string).collect();
                format!("duplicate case `{name}` at {}", at.join(", "))
            })
            .collect();
        if duplicates.is_empty() {
            return Ok(());
        }
        Err(CollectorError::input(format!(
            "{} case name(s) appear more than once in {}, so a row would not say which measurement it is; give a re-measured case its own name (e.g. a `_run2` suffix):\n  {}",
            duplicates.len(),
            files.join(", "),
            duplicates.join("\n  ")
        )))
    }
}
