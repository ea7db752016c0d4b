#!/usr/bin/env bash
# Sourced by scripts/test.sh: prints `check` against the measured H200 data.
# The bounds themselves are enforced by `cargo test -p headroom-tests`.
cargo run -q --release -p calibration-collector -- check measurements/public/h200-public.jsonl | tail -n 1
cargo run -q --release -p calibration-collector -- check measurements/h200/validation.jsonl | tail -n 1
