"""First allocation where the core's replay places a block differently from
an H200 allocation trace.

Each allocation of at least 1 MiB is reduced to (size in MiB, which earlier
allocation's address it reuses, or "new"); the first index where the two
sequences differ is where the replay's free lists diverged from the real
allocator's, and the lines around it say which tensor went elsewhere.

usage:
  cargo run -q --release -p headroom-core --example events -- SPEC.json 1 100000 \\
      [--after EARLIER.json] | grep -v "load weights\\|cuBLAS" > /tmp/model_events.txt
  python3 measurements/h200-segments/compare_placement.py CASE TRACE.jsonl /tmp/model_events.txt [SKIP]

TRACE.jsonl: `training-segments.jsonl` or `inference-segments.jsonl` (events
as [action, size, address, frame]). Sizes may differ by one MiB (unsplit
block remainders); SKIP ignores that many leading allocations.
"""
import json
import re
import sys


def real_events(case, path):
    for line in open(path):
        d = json.loads(line)
        if d["case"] == case:
            return [(e[0].lower(), e[1] >> 20, e[2], e[3]) for e in d["events"]
                    if e[0] in "AF" and e[1] >= 1 << 20]
    sys.exit(f"{case}: not in {path}")


def model_events(path):
    out = []
    for line in open(path):
        p = line.split()
        m = re.match(r"seg(\d+)\+\s*(\d+)MiB", " ".join(p[2:4]))
        if m:
            out.append((p[0], int(p[1]), (int(m.group(1)) << 40) + (int(m.group(2)) << 20), line.strip()))
    return out


def origins(seq):
    """(size, index of the allocation whose address this one reuses or 'new', event)."""
    last, out = {}, []
    for e in seq:
        if e[0] != "a":
            continue
        out.append((e[1], last.get(e[2], "new"), e))
        last[e[2]] = len(out) - 1
    return out


def main():
    case, trace, model = sys.argv[1:4]
    skip = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    real, ours = origins(real_events(case, trace)), origins(model_events(model))
    for i, (r, m) in enumerate(zip(real, ours)):
        if i >= skip and (abs(r[0] - m[0]) > 1 or r[1] != m[1]):
            print("first difference at allocation", i)
            for j in range(max(0, i - 6), min(i + 8, len(real), len(ours))):
                print(f"  real {real[j][0]:6} {str(real[j][1]):>5} {real[j][2][3][-45:]:45} | "
                      f"model {ours[j][0]:6} {str(ours[j][1]):>5} {ours[j][2][3][20:90]}")
            return
    print("no difference in", min(len(real), len(ours)), "allocations")


main()
