//! The core's integration tests: goldens, properties, traces pinned, accuracy of each mechanism.
//!
//! One test binary for the crate: a module per topic (`cargo test -p
//! headroom-core --test it MODULE::`).

mod advice;
mod bad_input;
mod beam_search;
mod checkpoint_recompute;
mod classification_heads;
mod common;
mod cudnn_split_k;
mod eager_attention;
mod fit_boundary_near_capacity;
mod frameworks;
mod generation_outputs;
mod golden;
mod hf_config;
mod layering;
mod likely_range;
mod loss_in_forward;
mod optimizer_implementations;
mod parallel;
mod presets;
mod process_history;
mod properties;
mod quantized;
mod qwen3;
mod shortcuts;
mod timeline;
mod vit_timm;
mod vit_training;
