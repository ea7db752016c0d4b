//! # calibration-collector
//!
//! The command-line side of headroom: estimate a spec, check the cost model
//! against measurement files, and (on a machine with an NVIDIA GPU) measure
//! real runs, fit the runtime coefficients and upload a calibration profile.
//! One module per command; shared pieces in [`cases`], [`stats`] and [`error`].

pub mod cases;
pub mod check;
pub mod error;
pub mod estimate_cmd;
pub mod stats;
