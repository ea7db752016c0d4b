//! Accuracy against every committed measurement, the committed files' own checks, and the spec reader fuzzed.
//!
//! One test binary for the crate: a module per topic (`cargo test -p
//! headroom-tests --test it MODULE::`).

mod accuracy;
mod committed_files;
mod fuzz_inputs;
