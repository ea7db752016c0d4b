//! The `headroom` command's tests: every command's exit codes and messages, goldens of the examples, hostile input, the harness's cases, and (ignored unless on a GPU) the measurements.
//!
//! One test binary for the crate: a module per topic (`cargo test -p
//! calibration-collector --test it MODULE::`).

mod accuracy_doc;
mod cli_advise;
mod cli_check_refusals;
mod cli_collector;
mod cli_estimate_check;
mod cli_hostile_input;
mod cli_keys;
mod cli_parallel;
mod cli_timeline;
mod common;
mod emulated_cards;
mod examples;
mod gpu;
mod harness_cases;
mod nvml_loading;
mod profile_validation;
mod upload;
