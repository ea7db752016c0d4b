//! # calibration-collector
//!
//! The command-line side of headroom: estimate a spec, check the cost model
//! against measurement files, and (on a machine with an NVIDIA GPU) probe the
//! card, measure real runs, fit the runtime coefficients and upload a
//! calibration profile. One module per command; shared pieces in [`cases`],
//! [`stats`], [`profile`] and [`error`]; every CUDA call is in [`gpu`] and
//! every NVML call in [`nvml`].

pub mod calibrate;
pub mod cases;
pub mod check;
pub mod error;
pub mod estimate_cmd;
pub mod fit;
pub mod gpu;
pub mod gpus_cmd;
pub mod nvml;
pub mod parallel_args;
pub mod parallel_run;
pub mod probe;
pub mod profile;
pub mod progress;
pub mod run;
pub mod stats;
pub mod template;
pub mod torchrun;
pub mod upload;
