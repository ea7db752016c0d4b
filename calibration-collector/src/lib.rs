//! # calibration-collector
//!
//! The command-line side of headroom: estimate a spec, check the cost model
//! against measurement files, and (on a machine with an NVIDIA GPU) probe the
//! card, measure real runs, fit the runtime coefficients and upload a
//! calibration profile. One file per command in [`commands`] (`run` is a
//! directory: its entry, one GPU, several GPUs through torchrun); shared
//! pieces in [`cases`], [`stats`], [`profile`] and [`error`]; every CUDA call
//! is in [`gpu`] and every NVML call in [`nvml`].

pub mod cases;
pub mod commands;
pub mod error;
pub mod gpu;
pub mod nvml;
pub mod parallel_args;
pub mod profile;
pub mod progress;
pub mod stats;
pub mod template;
