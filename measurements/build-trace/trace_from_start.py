"""Runs one model build's cases in this process, as `headroom_measure.py
--batch` runs each build in a child, with PyTorch's allocation history
recorded from before the model is built: every allocation, free and
segment event of the build and of each case, with the driver's addresses.
Writes the history as a pickle (compact it with
`../h200-segments/compact_snapshots.py PICKLE_DIR OUT.jsonl 0`).

usage: python3 trace_from_start.py CASES.jsonl MEASURED.jsonl PICKLE_DIR

The driver-level peaks this run reports are not comparable with other
runs' (the history starts CUDA before the harness's NVML baseline); the
allocator's events and peaks are the same as without it.
"""
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "calibration-collector", "python"))

import torch  # noqa: E402

import headroom_measure as h  # noqa: E402


def main():
    cases_path, out, pickle_dir = sys.argv[1:4]
    torch.cuda.memory._record_memory_history("all", context="alloc", stacks="python",
                                             max_entries=3_000_000)
    args = h.parse_args(["--group-file", cases_path, "--out", out, "--nvml"])
    h.run_group(h.load_cases(cases_path), args)
    snapshot = torch.cuda.memory._snapshot()
    os.makedirs(pickle_dir, exist_ok=True)
    name = os.path.splitext(os.path.basename(cases_path))[0]
    with open(os.path.join(pickle_dir, f"{name}-from-start.pickle"), "wb") as f:
        pickle.dump(snapshot, f)


if __name__ == "__main__":
    main()
