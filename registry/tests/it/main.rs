//! The registry tested for real: its API, uploads from the `headroom` command, and its SQLite file under concurrent clients and a SIGKILL.
//!
//! One test binary for the crate: a module per topic (`cargo test -p
//! headroom-registry --test it MODULE::`).

mod api;
mod collector_upload;
mod common;
mod community;
mod durability;
mod page;
