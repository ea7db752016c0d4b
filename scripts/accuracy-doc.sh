#!/usr/bin/env bash
# Regenerates docs/accuracy.md: `headroom check --markdown` over
# the measurement files listed in scripts/accuracy-files.txt, in that order.
# `cargo test -p calibration-collector --test it accuracy_doc::` fails while the
# committed docs/accuracy.md differs from what this writes.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t FILES < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' scripts/accuracy-files.txt)
TMP=docs/accuracy.md.tmp
trap 'rm -f "$TMP"' EXIT
cargo run -q --release -p calibration-collector -- check --markdown "${FILES[@]}" >"$TMP"
mv "$TMP" docs/accuracy.md
trap - EXIT
echo "wrote docs/accuracy.md (${#FILES[@]} measurement files)"
awk '/^## Summary/ { on = 1; next } /^## / { on = 0 } on && /^\|/' docs/accuracy.md
