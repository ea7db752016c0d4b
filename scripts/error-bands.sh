#!/usr/bin/env bash
# Regenerates core/src/uncertainty/measured.rs, the errors measured for each
# family, mode and strategy: `headroom check --bands` over the
# measurement files listed in scripts/accuracy-files.txt. Run it when those
# files or the model change (`cargo test -p calibration-collector --test
# accuracy_doc` fails while the committed table differs from what this
# writes), then commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t FILES < <(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' scripts/accuracy-files.txt)
OUT=core/src/uncertainty/measured.rs
TMP="$OUT.tmp"
trap 'rm -f "$TMP"' EXIT
cargo run -q --release -p calibration-collector -- check --bands "${FILES[@]}" >"$TMP"
mv "$TMP" "$OUT"
trap - EXIT
echo "wrote $OUT (${#FILES[@]} measurement files)"
