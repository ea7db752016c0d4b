"""python/examples/pack_jobs.py: processes at once on a card, from jobs_per_card."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import headroom
from conftest import REPO

EXAMPLE = REPO / "python" / "examples" / "pack_jobs.py"


def load_example():
    spec = importlib.util.spec_from_file_location("pack_jobs", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pack_jobs"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_longest_sequence_sizes_the_queue():
    pack_jobs = load_example()
    queue = [128, 256, 256, 512]
    plan = pack_jobs.plan(queue, "h100")
    assert plan.gpu.id == "h100-80gb" and plan.sequences == 4
    assert set(plan.jobs_per_length) == {128, 256, 512}
    # Longer sequences need more memory: never more processes.
    jobs = [plan.jobs_per_length[n] for n in (128, 256, 512)]
    assert jobs == sorted(jobs, reverse=True) and jobs[-1] >= 1
    assert plan.processes == plan.jobs_per_length[512]
    assert plan.rounds == -(-4 // plan.processes)


def test_it_is_the_estimates_jobs_per_card_and_the_table_agrees():
    pack_jobs = load_example()
    spec = pack_jobs.esmfold_spec(256)
    plan = pack_jobs.plan([256], "rtx-4090")
    est = headroom.estimate(spec)
    assert plan.processes == est.jobs_per_card("rtx-4090")
    reservation = headroom.card_fit(spec, "rtx-4090").reservation_bytes
    assert plan.processes == headroom.find_gpu("rtx-4090").usable_bytes // reservation


def test_a_length_too_long_for_the_card_runs_no_process():
    pack_jobs = load_example()
    plan = pack_jobs.plan([64, 3000], "rtx-3060-12gb", chunk_size=None)
    assert plan.jobs_per_length[3000] == 0 and plan.processes == 0 and plan.rounds is None
    assert plan.jobs_per_length[64] >= 1


def test_the_command_line(tmp_path):
    queue = tmp_path / "lengths.txt"
    queue.write_text("100\n200\n200\n")
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--gpu", "l4", "--lengths-file", str(queue)],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("NVIDIA L4: 3 sequences")
    assert "process(es) at once" in run.stdout
