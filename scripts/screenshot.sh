#!/usr/bin/env bash
# Takes the README's picture of the calculator page, on purpose (the test run
# writes its own screenshots to the ignored screenshots/ folder instead):
#   ./scripts/screenshot.sh [OUT.png]     (default docs/images/calculator.png)
# Builds the release page with Trunk into dist/, serves it on a free local
# port, and saves headless Chromium's screenshot of the Llama 3.1 8B page.
# Set HEADROOM_SKIP_BUILD=1 to use the dist/ already built.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

OUT="${1:-docs/images/calculator.png}"

if [ "${HEADROOM_SKIP_BUILD:-0}" != "1" ]; then
    echo "[screenshot] building the page (trunk build --release --offline)"
    cargo fetch
    trunk build --release --offline
fi

PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
python3 -m http.server "$PORT" --bind 127.0.0.1 --directory dist >/dev/null 2>&1 &
SERVER_PID=$!
PROFILE_DIR="$(mktemp -d)"
TMP_PNG="$(mktemp --suffix=.png)"
cleanup() { kill "$SERVER_PID" 2>/dev/null || true; rm -rf "$PROFILE_DIR" "$TMP_PNG"; }
trap cleanup EXIT
for _ in $(seq 1 50); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/')" 2>/dev/null; then break; fi
    sleep 0.1
done

# The same flags as the screenshot step of scripts/test.sh.
timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$PROFILE_DIR" --virtual-time-budget=5000 --hide-scrollbars \
    --window-size=1400,1800 --screenshot="$TMP_PNG" \
    "http://127.0.0.1:$PORT/?model=llama-3.1-8b" 2>/dev/null

if [ ! -s "$TMP_PNG" ]; then
    echo "[screenshot] FAIL: Chromium wrote no picture"
    exit 1
fi
mkdir -p "$(dirname "$OUT")"
cp "$TMP_PNG" "$OUT"
chmod 644 "$OUT"
ls -l "$OUT"
echo "[screenshot] review it, then commit it: git add $OUT"
