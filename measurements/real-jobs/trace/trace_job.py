"""Runs a job script under PyTorch's allocation history and saves the
snapshot (and another at the first out-of-memory error, if any), for `measurements/h200-segments/compact_snapshots.py`.

    python3 trace_job.py SNAPSHOT_DIR CASE_NAME SCRIPT.py [SCRIPT ARGS...]
"""
import os
import pickle
import runpy
import sys

import torch


def main():
    out_dir, case, script, *args = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, context="all", stacks="python")

    def at_out_of_memory(device, alloc, device_alloc, device_free):
        # The allocator's segments and blocks when a request failed (after
        # it released its cache and retried), before the exception unwinds.
        with open(os.path.join(out_dir, case + "-at-oom.pickle"), "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)

    torch._C._cuda_attach_out_of_memory_observer(at_out_of_memory)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(os.path.join(out_dir, case + ".pickle"), "wb") as f:
            pickle.dump(snapshot, f)


if __name__ == "__main__":
    main()
