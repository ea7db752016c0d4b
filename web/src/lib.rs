//! # headroom-web
//!
//! The calculator page: pick a model and a workload, see peak VRAM against
//! sequence length, which GPUs fit, and share the whole setup as a link.
//!
//! Every figure comes from `headroom_core`; this crate converts units and
//! lays things out. The logic (URL state, curve assembly, CSV/JSON, the GPU
//! fit table, chart drawing, which job runs when, the messages to the
//! worker threads) builds and is tested natively; the Leptos page in `app`
//! and the worker threads in `workers` build for wasm32 only.
#![forbid(unsafe_code)]

pub mod advice;
pub mod calib;
pub mod chart;
pub mod curve;
pub mod defaults;
pub mod export;
pub mod format;
pub mod gpu_rows;
pub mod import;
pub mod intake;
pub mod jobs;
pub mod protocol;
pub mod query;
pub mod registry;
pub mod sort;
pub mod state;
pub mod timeline;
pub mod vocab;
pub mod words;

#[cfg(target_arch = "wasm32")]
pub mod app;
#[cfg(target_arch = "wasm32")]
pub mod panels;
#[cfg(target_arch = "wasm32")]
pub mod workers;
