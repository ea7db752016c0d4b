#!/usr/bin/env bash
# Serves headroom on localhost: ./scripts/serve.sh [port]
# (or PORT=9000 ./scripts/serve.sh). Builds the release page with Trunk into
# dist/ and the profile registry, then runs the registry, one process:
#   http://127.0.0.1:PORT/                  the calculator page
#   http://127.0.0.1:PORT/api/v1/profiles   the profiles `headroom upload --to`
#                                           sends (registry/README.md)
# Profiles are kept in headroom-registry.sqlite at the repository root
# (git-ignored, created on first start with the committed profiles of
# calibration/profiles/, the H200's and the H100's); HEADROOM_REGISTRY_DB=FILE
# keeps them elsewhere.
#
# The registry runs `--open` (uploads need no token and no review): it
# listens on 127.0.0.1 only. To open one to a community (tokens, review,
# backups, TLS through a proxy), see registry/README.md.
#
# ./scripts/serve.sh --watch [port]: Trunk's dev server on PORT instead,
# rebuilding the page on every change, with the registry beside it on
# REGISTRY_PORT (default 8090) and /api/ proxied to it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

WATCH=0
if [ "${1:-}" = "--watch" ]; then
    WATCH=1
    shift
fi
PORT="${1:-${PORT:-8080}}"
DB="${HEADROOM_REGISTRY_DB:-headroom-registry.sqlite}"
REGISTRY=target/release/headroom-registry

echo "[serve] fetching crates"
cargo fetch
echo "[serve] building the profile registry (cargo build --release -p headroom-registry)"
cargo build --release --offline -p headroom-registry

if [ "$WATCH" = "1" ]; then
    REGISTRY_PORT="${REGISTRY_PORT:-8090}"
    "$REGISTRY" --db "$DB" --listen "127.0.0.1:$REGISTRY_PORT" --open --dist dist --seed calibration/profiles &
    REGISTRY_PID=$!
    trap 'kill "$REGISTRY_PID" 2>/dev/null || true' EXIT
    echo "[serve] building; the page will be at http://127.0.0.1:$PORT/ (rebuilt on change; /api/ goes to the registry on port $REGISTRY_PORT)"
    trunk serve --release --offline --address 127.0.0.1 --port "$PORT" \
        --proxy-backend "http://127.0.0.1:$REGISTRY_PORT/api/"
    exit
fi

echo "[serve] building the page (trunk build --release --offline)"
trunk build --release --offline
echo "[serve] the page and the profile registry at http://127.0.0.1:$PORT/"
exec "$REGISTRY" --db "$DB" --listen "127.0.0.1:$PORT" --open --dist dist --seed calibration/profiles
