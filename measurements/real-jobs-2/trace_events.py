"""The allocations and frees above 1 MiB of a compacted trace
(`../h200-segments/compact_snapshots.py`), from its first allocation of
more than 50 MiB outside the model's construction (the training loop's
first batch), one per line: `A BYTES` or `F BYTES`. The core's tests
compare a replay with these lines.

usage: python3 trace_events.py TRACE.jsonl.gz CASE BUILD_FRAME > OUT.txt
(BUILD_FRAME: the frame of the model's construction, e.g. `timm_train.py:33`)
"""
import gzip
import json
import sys

path, case, build = sys.argv[1:4]
for line in gzip.open(path, "rt"):
    row = json.loads(line)
    if row["case"] != case:
        continue
    events = row["events"]
    start = next(i for i, e in enumerate(events)
                 if e[0] == "A" and build not in e[3] and e[1] > 50 << 20)
    for e in events[start:]:
        if e[0] in "AF" and e[1] > 1 << 20:
            print(e[0], e[1])
