#!/usr/bin/env bash
# Serves the calculator page on localhost: ./scripts/serve.sh [port]
# (or PORT=9000 ./scripts/serve.sh). Builds the release page with Trunk.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

PORT="${1:-${PORT:-8080}}"
echo "[serve] fetching crates"
cargo fetch
echo "[serve] building; the page will be at http://127.0.0.1:$PORT/"
exec trunk serve --release --offline --address 127.0.0.1 --port "$PORT"
