#!/usr/bin/env bash
# Installs what building and testing headroom needs, skipping everything that
# is already there with the right version. Idempotent; run it or source it
# (serve.sh and test.sh source it, which also puts the tools on PATH).
# Installs go to ~/.cargo/bin, ~/.cache/headroom-tools and the system (apt),
# never into the checkout.
set -euo pipefail

TRUNK_VERSION=0.21.14
WASM_BINDGEN_VERSION=0.2.130
BINARYEN_VERSION=132.0.0
TOOLS_DIR="${HEADROOM_TOOLS_DIR:-$HOME/.cache/headroom-tools}"

say() { echo "[setup] $*"; }

# npm's wasm-opt first: Debian's binaryen (wasm-opt 108) breaks the module.
export PATH="$TOOLS_DIR/node_modules/.bin:$HOME/.cargo/bin:$PATH"

for target in wasm32-unknown-unknown thumbv7em-none-eabihf; do
    if rustup target list --installed | grep -qx "$target"; then
        say "rust target $target: present"
    else
        say "rust target $target: adding"
        rustup target add "$target"
    fi
done

if command -v trunk >/dev/null 2>&1 && trunk --version | grep -q "trunk $TRUNK_VERSION"; then
    say "trunk $TRUNK_VERSION: present"
else
    say "trunk $TRUNK_VERSION: installing (about 10 minutes on 2 cores)"
    cargo install trunk --version "$TRUNK_VERSION" --locked
fi

if command -v wasm-bindgen >/dev/null 2>&1 && command -v wasm-bindgen-test-runner >/dev/null 2>&1 \
    && wasm-bindgen --version | grep -q "wasm-bindgen $WASM_BINDGEN_VERSION"; then
    say "wasm-bindgen-cli $WASM_BINDGEN_VERSION: present"
else
    # No --locked: its lockfile wants a crate version the registry mirror lacks.
    say "wasm-bindgen-cli $WASM_BINDGEN_VERSION: installing (about 3 minutes)"
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

if [ -x "$TOOLS_DIR/node_modules/.bin/wasm-opt" ] \
    && "$TOOLS_DIR/node_modules/.bin/wasm-opt" --version | grep -q "version ${BINARYEN_VERSION%%.*}"; then
    say "wasm-opt (npm binaryen@$BINARYEN_VERSION): present"
else
    say "wasm-opt: installing npm binaryen@$BINARYEN_VERSION into $TOOLS_DIR"
    mkdir -p "$TOOLS_DIR"
    npm install --prefix "$TOOLS_DIR" --no-audit --no-fund "binaryen@$BINARYEN_VERSION"
fi

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    say "chromium and chromedriver: present"
else
    say "chromium and chromedriver: installing with apt-get"
    SUDO=""
    if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y chromium chromium-driver
fi

# The measuring harness's case reader is tested without a GPU: Python with
# transformers (its model configs; no torch), in a virtual environment of
# the tools folder. HEADROOM_HARNESS_PYTHON points the tests at it.
TRANSFORMERS_VERSION=5.17.0
HARNESS_VENV="$TOOLS_DIR/harness-venv"
if [ -x "$HARNESS_VENV/bin/python" ] \
    && "$HARNESS_VENV/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" 2>/dev/null; then
    say "harness python (transformers $TRANSFORMERS_VERSION): present"
else
    say "harness python: installing transformers $TRANSFORMERS_VERSION into $HARNESS_VENV"
    mkdir -p "$TOOLS_DIR"
    python3 -m venv "$HARNESS_VENV"
    "$HARNESS_VENV/bin/pip" install --quiet --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION"
fi
export HEADROOM_HARNESS_PYTHON="$HARNESS_VENV/bin/python"
