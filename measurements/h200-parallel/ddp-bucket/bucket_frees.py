"""What became of each gradient bucket in a traced DDP run.

For each trace written by headroom_parallel.py --snapshot-dir, lists the
events of blocks of at least 1 GiB (DDP's flat gradient buckets, the
AdamW state, the weights) in order: the event's index among all events,
its action, size and address, the allocated bytes right after it (from
the trace's own events, counting from the first), and the innermost
frames that name the code that did it, C++ included. A bucket freed by
NCCL's watchdog thread shows ProcessGroupNCCL frames and no Python ones;
one freed by the rebuild shows the reducer's `rebuild_buckets`.

  python3 bucket_frees.py TRACE.trace.json.gz ...
"""
import gzip
import json
import sys

BIG = 1 << 30


def main(paths):
    for path in paths:
        with gzip.open(path, "rt") as f:
            events = json.load(f)["events"]
        print(f"== {path}: {len(events)} events")
        allocated = 0
        highest = 0
        for i, (action, addr, size, stream, frames) in enumerate(events):
            if action == "alloc":
                allocated += size
            elif action == "free_requested":
                allocated -= size
            highest = max(highest, allocated)
            if size < BIG:
                continue
            # file:line:function; C++ frames often have no file ("??").
            named = [fr for fr in frames if fr.split(":", 2)[-1].strip("? ")][:12]
            print(f"{i:>8} {action:<16} {size:>14,} B at {addr:#x}  allocated after {allocated:>16,}"
                  f"  (stream {stream})")
            for fr in named:
                print(f"{'':>10}{fr}")
        print(f"   highest allocated within the trace (from its first event): {highest:,} B")


if __name__ == "__main__":
    main(sys.argv[1:])
