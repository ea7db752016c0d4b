"""Shared fixtures: the repository, the `headroom` binary, and the rule that
tests marked `torch` never skip in the with-torch run.

`HEADROOM_BIN` names the command-line binary the Python answers are
compared with (default: `target/debug/headroom`, which `cargo build -p
calibration-collector` makes). With `HEADROOM_REQUIRE_TORCH=1` (the
with-torch run of scripts/test.sh) a skipped test fails the run.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.json"))
REQUIRE_TORCH = os.environ.get("HEADROOM_REQUIRE_TORCH") == "1"


def headroom_bin() -> Path:
    path = Path(os.environ.get("HEADROOM_BIN", REPO / "target" / "debug" / "headroom"))
    if not path.exists():
        pytest.fail(f"no headroom binary at {path}: run `cargo build -p calibration-collector` or set HEADROOM_BIN")
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Runs the `headroom` command from the repository root."""
    return subprocess.run(
        [str(headroom_bin()), *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


def rel(path: Path) -> str:
    """A path as the tests pass it to both the CLI and Python (relative to the repository)."""
    return str(path.relative_to(REPO))


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


@pytest.fixture
def write_spec(tmp_path):
    """Writes a spec (a dict or text) to a file and returns its path."""

    def write(spec, name="spec.json"):
        path = tmp_path / name
        path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
        return path

    return write


_skipped: list[str] = []


def pytest_runtest_logreport(report):
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_collectreport(report):
    if report.skipped:  # a module that skipped itself (pytest.importorskip)
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    # pytest's hook for the end of the run (its name and argument are pytest's).
    if REQUIRE_TORCH and _skipped:
        print(f"\nFAIL: HEADROOM_REQUIRE_TORCH=1 and {len(_skipped)} test(s) skipped: {_skipped}")
        session.exitstatus = 1
