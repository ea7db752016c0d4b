"""Aligns a measured allocation trace with the model's replay, event by
event, and stops at the first difference: the order of operations (an
allocation or free of another size) or the placement of an allocation (a
different segment or offset). This is how the traced mechanisms in
`measurements/h200-generalization/README.md` were found.

usage:
  cargo run --release -p headroom-core --example dump_events -- CASE.json > /tmp/ours.txt
  python3 measurements/h200-segments/align_trace.py TRACE-SEGMENTS.jsonl CASE_NAME /tmp/ours.txt [TOLERANCE_MIB]

TOLERANCE_MIB (default 1) is how far an allocation's size may differ:
a larger one looks past per-shape workspace sizes to the order of events
and the placements after them.

CASE.json is the measured case (with its process history); TRACE-SEGMENTS
is a `trace-segments*.jsonl` from `compact_snapshots.py`. Both sides keep
large-pool events (> 1 MiB). Segments are matched in creation order;
blocks in segments that existed before the trace (weights) are `pre`.
Frees are compared by kind only (their order within a burst may differ
harmlessly); allocations by size (within 1 MiB: the model logs block sizes,
the trace requests) and by placement.
"""
import bisect
import json
import sys

MIB = 1 << 20


def measured_events(path, case):
    for line in open(path):
        c = json.loads(line)
        if c["case"] == case:
            return c["events"]
    sys.exit(f"{case} not in {path}")


def main():
    trace, case, ours_path = sys.argv[1:4]
    tolerance = float(sys.argv[4]) * MIB if len(sys.argv) > 4 else MIB
    real, segments = [], []
    for kind, size, address, frame in measured_events(trace, case):
        if kind == "S" and size > 2 * MIB:
            segments.append((address, size))
        if kind in "AF" and size > MIB:
            real.append((kind, size, address, frame))
    order = {base: i for i, (base, _) in enumerate(segments)}
    bases = sorted(segments)

    def real_place(address):
        k = bisect.bisect_right([b for b, _ in bases], address) - 1
        if k < 0 or address >= bases[k][0] + bases[k][1]:
            return ("pre", 0)
        return (order[bases[k][0]], (address - bases[k][0]) // MIB)

    ours = []
    for line in open(ours_path):
        kind, size, address, rest = line.split(" ", 3)
        ours.append((kind, int(size), int(address), rest.strip()))
    loading = {a >> 44 for _, _, a, r in ours if "load weights" in r}
    ours = [o for o in ours if "load weights" not in o[3]]
    first_seen = {}
    for _, _, address, _ in ours:
        seg = address >> 44
        if seg not in loading and seg not in first_seen:
            first_seen[seg] = len(first_seen)

    def our_place(address):
        seg = address >> 44
        if seg in loading:
            return ("pre", 0)
        return (first_seen[seg], (address & ((1 << 44) - 1)) // MIB)

    n = min(len(real), len(ours))
    stop, why = n, "none"
    for i in range(n):
        r, o = real[i], ours[i]
        if r[0] != o[0] or (r[0] == "A" and abs(r[1] - o[1]) > tolerance):
            stop, why = i, "order"
            break
        rp, op = real_place(r[2]), our_place(o[2])
        if r[0] == "A" and rp != op and "pre" not in (rp[0], op[0]):
            stop, why = i, "placement"
            break
    print(f"{len(real)} measured and {len(ours)} modelled events; first difference: {why} at {stop}")
    for i in range(max(0, stop - 10), min(n, stop + 6)):
        r, o = real[i], ours[i]
        print(i, r[0], round(r[1] / MIB, 2), real_place(r[2]), r[3][-36:], "|",
              o[0], round(o[1] / MIB, 2), our_place(o[2]), o[3][:50])


if __name__ == "__main__":
    main()
