//! # headroom-core
//!
//! Predicts the peak GPU memory of a PyTorch workload: LLM inference and
//! training, encoders (BERT, ESM-2), ViT, ESMFold and convolutional networks.
//!
//! The estimate is not a formula of the parameter count. For each model
//! family, [`families`] emits the tensors a real PyTorch run allocates and
//! frees, op by op (forward, backward, optimizer step, over the steps a real
//! run takes). [`allocator`] replays that stream through a model of
//! PyTorch's CUDA caching allocator to find the peak of allocated and
//! reserved bytes. [`runtime`] adds what lives outside the allocator: the
//! CUDA context and library handles, whose figures come from a calibration
//! profile (H200 defaults measured in `measurements/public/`).
//!
//! ## What this crate does not do
//! No IO, no clock, no GPU, no DOM, no network: callers pass data in and get
//! data out. It is `no_std` with `alloc`; the `std` feature only adds
//! `std::error::Error` impls, `serde` adds JSON (de)serialisation.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod advice;
pub mod allocator;
pub mod arch;
pub mod bytes;
#[cfg(feature = "serde")]
pub mod calibration;
pub mod component;
pub mod error;
pub mod estimate;
pub mod families;
pub mod gpus;
pub mod graph;
#[cfg(feature = "serde")]
pub mod hf_config;
pub mod keys;
pub mod parallel;
pub mod presets;
#[cfg(feature = "serde")]
pub mod readers;
#[cfg(feature = "serde")]
pub mod report;
pub mod runtime;
pub mod search;
pub mod timeline;
pub mod trace;
pub mod uncertainty;
pub mod workload;

pub use arch::Architecture;
pub use bytes::Bytes;
pub use component::Component;
pub use error::Error;
pub use estimate::{estimate, Estimate};
pub use runtime::RuntimeProfile;
pub use workload::Workload;
