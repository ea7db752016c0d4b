"""Bad input: headroom.SpecError with the CLI's message, naming the field."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import headroom
from conftest import REPO, run_cli

BAD_SPECS = {
    "unknown key": {"model": "llama-3.1-8b", "workload": {"mode": "inference", "seqlen": 512}},
    "bad value": {"model": "llama-3.1-8b", "workload": {"mode": "inference", "dtype": "fp12"}},
    "missing mode": {"model": "llama-3.1-8b", "workload": {"batch": 1}},
    "unknown model": {"model": "llama-9", "workload": {"mode": "inference"}},
    "framework argument": {
        "model": "qwen3-1.7b",
        "workload": {"framework": "hf_trainer", "training_args": {"per_device_train_batch": 8}},
    },
    "refused by the model": {
        "model": "llama-3.1-8b",
        "workload": {"mode": "inference", "seq_len": 0},
    },
    "not json": "{\"model\": ",
}


@pytest.mark.parametrize("case", BAD_SPECS, ids=str)
def test_spec_error_is_the_clis_message(case, write_spec):
    path = write_spec(BAD_SPECS[case])
    cli = run_cli("estimate", str(path))
    assert cli.returncode == 1
    with pytest.raises(headroom.SpecError) as raised:
        headroom.estimate(path)
    assert cli.stderr.strip() == f"error: {raised.value}"


@pytest.mark.parametrize("case", [c for c in BAD_SPECS if c != "not json"], ids=str)
def test_a_dicts_error_starts_with_the_field(case, write_spec):
    path = write_spec(BAD_SPECS[case])
    with pytest.raises(headroom.SpecError) as from_path:
        headroom.estimate(path)
    with pytest.raises(headroom.SpecError) as from_dict:
        headroom.estimate(BAD_SPECS[case])
    assert str(from_path.value) == f"{path}: {from_dict.value}"


def test_the_field_is_named():
    with pytest.raises(headroom.SpecError, match=r"`workload.seqlen`: unknown key; did you mean `seq_len`\?"):
        headroom.estimate(BAD_SPECS["unknown key"])
    with pytest.raises(headroom.SpecError, match="workload.training_args.per_device_train_batch"):
        headroom.gpus(BAD_SPECS["framework argument"])
    assert issubclass(headroom.SpecError, ValueError)


def test_an_unknown_card_names_the_argument():
    with pytest.raises(ValueError, match=r"^gpu: unknown GPU `rtx-9999`; allowed: rtx-3060-12gb"):
        headroom.estimate("examples/llama-8b-generate.json", gpu="rtx-9999")
    with pytest.raises(ValueError, match="^gpu: `a100` could be"):
        headroom.estimate("examples/llama-8b-generate.json").fits("a100")


def test_a_spec_of_another_type_is_refused():
    with pytest.raises(TypeError, match="^spec: expected a dict"):
        headroom.estimate(42)


def test_python_m_headroom_prints_the_clis_bytes_and_exit_codes(write_spec):
    cli = run_cli("estimate", "examples/esmfold-1024.json", "--gpu", "l4")
    py = subprocess.run(
        [sys.executable, "-m", "headroom", "estimate", "examples/esmfold-1024.json", "--gpu", "l4"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert py.returncode == 0 and py.stdout == cli.stdout
    bad = write_spec(BAD_SPECS["unknown key"])
    cli = run_cli("estimate", str(bad))
    py = subprocess.run(
        [sys.executable, "-m", "headroom", "estimate", str(bad)], capture_output=True, text=True
    )
    assert (py.returncode, py.stderr) == (cli.returncode, cli.stderr)
    table = subprocess.run(
        [sys.executable, "-m", "headroom", "gpus", "examples/resnet50-channels-last.json", "--json"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert table.returncode == 0, table.stderr
    assert {row["gpu"] for row in json.loads(table.stdout)} == {c.id for c in headroom.catalog()}
    usage = subprocess.run([sys.executable, "-m", "headroom", "nonsense"], capture_output=True, text=True)
    assert usage.returncode == 64


def test_the_package_needs_no_torch():
    code = (
        "import sys, headroom; headroom.estimate('examples/llama-8b-generate.json'); "
        "headroom.check_fits('examples/llama-8b-generate.json', gpu='h200'); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, sorted(sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
