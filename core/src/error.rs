//! Errors: every bad input names the field and what it accepts.

use alloc::string::String;
use core::fmt;

/// What went wrong with an input. Messages name the offending field and,
/// where there is one, the allowed range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A field is present but its value is out of range or of the wrong kind.
    InvalidField {
        /// Dotted path of the field, e.g. `workload.seq_len`.
        field: String,
        /// What was wrong with the value.
        problem: String,
        /// What the field accepts, e.g. `an integer from 1 to 1048576`.
        allowed: String,
    },
    /// A required field is absent.
    MissingField {
        /// Dotted path of the field.
        field: String,
        /// What the field accepts.
        allowed: String,
    },
    /// A preset id that the catalog does not know.
    UnknownPreset {
        /// The id as given.
        id: String,
        /// A few ids that do exist, comma separated.
        known: String,
    },
    /// A Hugging Face `model_type` the importer does not support.
    UnsupportedModelType {
        /// The `model_type` as given.
        model_type: String,
        /// The supported model types, comma separated.
        supported: String,
    },
    /// A combination that headroom does not model (for example LoRA on ESMFold).
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The input is not valid JSON.
    Json {
        /// Where (the document) and what the parser said.
        message: String,
    },
}

impl Error {
    /// Shorthand for [`Error::InvalidField`].
    pub fn invalid(field: &str, problem: impl Into<String>, allowed: &str) -> Error {
        Error::InvalidField {
            field: field.into(),
            problem: problem.into(),
            allowed: allowed.into(),
        }
    }

    /// Shorthand for [`Error::MissingField`].
    pub fn missing(field: &str, allowed: &str) -> Error {
        Error::MissingField {
            field: field.into(),
            allowed: allowed.into(),
        }
    }

    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(what: impl Into<String>) -> Error {
        Error::Unsupported { what: what.into() }
    }

    /// The field an invalid or missing field error names.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidField { field, .. } | Error::MissingField { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidField {
                field,
                problem,
                allowed,
            } => write!(f, "`{field}`: {problem}; allowed: {allowed}"),
            Error::MissingField { field, allowed } => {
                write!(f, "`{field}` is missing; allowed: {allowed}")
            }
            Error::UnknownPreset { id, known } => {
                write!(
                    f,
                    "`model`: unknown preset `{id}`; known presets include: {known}"
                )
            }
            Error::UnsupportedModelType {
                model_type,
                supported,
            } => write!(
                f,
                "`model_type`: `{model_type}` is not supported; supported: {supported}"
            ),
            Error::Unsupported { what } => write!(f, "not supported: {what}"),
            Error::Json { message } => write!(f, "malformed JSON: {message}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for Error {}

/// Checks that an integer field lies in `[min, max]`.
pub fn check_range(field: &str, value: u64, min: u64, max: u64) -> Result<(), Error> {
    if value < min || value > max {
        let problem = if value == 0 {
            "must not be 0".into()
        } else {
            alloc::format!("{value} is out of range")
        };
        return Err(Error::invalid(
            field,
            problem,
            &alloc::format!("an integer from {min} to {max}"),
        ));
    }
    Ok(())
}
