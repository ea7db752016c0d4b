"""Every spec of the repository's examples/ through Python and through the
`headroom` binary: the same bytes."""

from __future__ import annotations

import re

import pytest

import headroom
from conftest import EXAMPLES, rel, run_cli


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("gpu", [None, "rtx-4090", "h200"])
def test_estimate_equals_the_cli_byte_for_byte(example, gpu):
    args = ["estimate", rel(example)] + (["--gpu", gpu] if gpu else [])
    cli = run_cli(*args)
    assert cli.returncode == 0, cli.stderr
    assert headroom.estimate(rel(example), gpu=gpu).to_json() == cli.stdout


def test_the_examples_are_all_there():
    assert len(EXAMPLES) >= 6


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_dict_string_and_path_give_one_answer(example):
    text = example.read_text()
    by_path = headroom.estimate(example).to_json()
    assert headroom.estimate(text).to_json() == by_path
    import json

    assert headroom.estimate(json.loads(text)).to_json() == by_path


def test_estimate_fields_are_the_documents():
    est = headroom.estimate("examples/llama-8b-generate.json")
    doc = est.to_dict()
    assert est.driver_peak == doc["driver_peak"] > est.reserved_peak >= est.allocated_peak > 0
    assert sum(s.bytes for s in est.breakdown) == est.driver_peak
    assert est.likely_range.low <= est.driver_peak <= est.likely_range.high
    assert est.peak_op == doc["peak_op"] and est.model["id"] == "llama-3.1-8b"
    assert est.gpu is None and est.without_a_card is None


def test_a_job_too_large_for_every_card_says_so_as_the_cli_does(write_spec):
    path = write_spec(
        {"model": "llama-3.1-8b", "workload": {"mode": "inference", "batch": 64, "seq_len": 131072}}
    )
    cli = run_cli("estimate", str(path))
    assert cli.returncode == 0, cli.stderr
    est = headroom.estimate(path)
    assert est.to_json() == cli.stdout
    assert est.without_a_card is not None and est.without_a_card["fits_any_card"] is False


@pytest.mark.parametrize("example", ["llama-8b-generate", "resnet50-channels-last"])
def test_timeline_equals_the_cli_csv(example, tmp_path):
    out = tmp_path / "t.csv"
    cli = run_cli("estimate", f"examples/{example}.json", "--timeline", str(out))
    assert cli.returncode == 0, cli.stderr
    tl = headroom.timeline(f"examples/{example}.json")
    assert tl.csv == out.read_text()
    assert tl.peak.driver_bytes == headroom.estimate(f"examples/{example}.json").driver_peak


def parse_gpus_table(text: str) -> dict[str, dict]:
    """The CLI's `gpus` table: name -> fits, jobs, max length, max batch, fewest per strategy."""
    lines = text.splitlines()
    header_at = next(i for i, l in enumerate(lines) if l.startswith("gpu "))
    strategies = re.findall(r"gpus (\w+)", lines[header_at])
    rows = {}
    for line in lines[header_at + 1 :]:
        if not line.strip():
            break
        name, rest = line[:30].strip(), line[30:].split()
        value = lambda s: None if s == "-" else int(s)
        fits, jobs, length, batch = rest[2], rest[3], rest[4], rest[5]
        fewest = dict(zip(strategies, (value(s) for s in rest[len(rest) - len(strategies) :])))
        rows[name] = {
            "fits": fits == "yes",
            "jobs": int(jobs),
            "max_length": value(length),
            "max_batch": value(batch),
            "fewest_gpus": fewest,
        }
    return rows


# The CLI's table searches every card's longest length and largest batch:
# up to a minute per spec in the debug build the tests use, so the table
# is compared on the examples whose searches are short (a decoder, a CNN);
# test_estimate_fits_and_jobs_per_card_follow_the_table covers the rest.
FAST_EXAMPLES = [p for p in EXAMPLES if p.stem in ("custom-config", "resnet50-channels-last")]


@pytest.mark.parametrize("example", FAST_EXAMPLES, ids=lambda p: p.stem)
def test_gpus_table_equals_the_cli(example):
    cli = run_cli("gpus", rel(example))
    assert cli.returncode == 0, cli.stderr
    expected = parse_gpus_table(cli.stdout)
    table = headroom.gpus(rel(example))
    assert [r.gpu.name for r in table.rows] == list(expected)
    for row in table.rows:
        want = expected[row.gpu.name]
        got = {
            "fits": row.fits,
            "jobs": row.jobs,
            "max_length": row.max_length,
            "max_batch": row.max_batch,
            "fewest_gpus": row.fewest_gpus,
        }
        assert got == want, row.gpu.name


def test_estimate_fits_and_jobs_per_card_follow_the_table():
    spec = "examples/llama-8b-generate.json"
    est = headroom.estimate(spec)
    table = headroom.gpus(spec)
    for gpu in ("rtx-3060-12gb", "rtx-4090", "h200", "h100-80gb"):
        row = table.row(gpu)
        assert est.fits(gpu) == row.fits
        assert est.jobs_per_card(gpu) == row.jobs
    assert est.jobs_per_card("h200") > 1


def test_advice_equals_the_clis():
    cli = run_cli("gpus", "examples/llama-8b-lora.json", "--advise", "rtx-4090")
    assert cli.returncode == 0, cli.stderr
    listed = re.findall(r"^\s+\d+\. (.+?)\s+peak ", cli.stdout, re.M)
    advice = headroom.advise("examples/llama-8b-lora.json", "rtx-4090")
    assert not advice.fits_already and advice.suggestions
    assert [s.what for s in advice.suggestions] == listed
    assert headroom.advise("examples/llama-8b-generate.json", "h200").fits_already


def test_catalog_lists_every_card_of_the_table():
    names = [c.name for c in headroom.catalog()]
    assert names == [r.gpu.name for r in headroom.gpus("examples/llama-8b-generate.json").rows]
    assert headroom.find_gpu("H200").id == "h200"
