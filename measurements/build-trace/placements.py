"""Checks each new segment of a from-the-start trace against the rule the
allocator model gives the driver (`allocator::VA_GRANULE`): a new segment
takes the lowest free range that fits among the ranges PyTorch's own
segments were mapped in (each segment's size rounded up to 32 MiB), else
a new range. Prints the first segments placed otherwise, and the counts.

usage: python3 placements.py trace-from-start.jsonl
"""
import json
import sys

MIB = 1 << 20
GRANULE = 32 * MIB


def free_holes(ranges, live):
    """Free space inside the known ranges, not covered by a live segment."""
    out = []
    for start, length in ranges:
        cursor = start
        for address, size in sorted((a, s) for a, s in live.items() if start <= a < start + length):
            if address > cursor:
                out.append((cursor, address - cursor))
            cursor = max(cursor, address + size)
        if cursor < start + length:
            out.append((cursor, start + length - cursor))
    return sorted(out)


def main():
    events = json.loads(open(sys.argv[1]).readline())["events"]
    base = next(e[2] for e in events if e[0] == "S")
    live, ranges = {}, []
    by_rule = otherwise = 0
    for i, (kind, size, address, frame) in enumerate(events):
        if kind == "S":
            fitting = [h for h in free_holes(ranges, live) if h[1] >= size]
            in_hole = any(start <= address < start + length for start, length in fitting)
            if fitting and fitting[0][0] != address:
                otherwise += 1
                if otherwise <= 15:
                    print(f"event {i}: {size // MIB} MiB at {(address - base) // MIB:+} MiB "
                          f"({'in a known hole' if in_hole else 'a new range'}); the rule's: "
                          f"{(fitting[0][0] - base) // MIB:+} MiB  ({frame[:50]})")
            else:
                by_rule += 1
            live[address] = size
            if not in_hole:
                ranges.append((address, -(-size // GRANULE) * GRANULE))
        elif kind == "s":
            live.pop(address)
    print(f"segments where the rule allows: {by_rule}; placed otherwise: {otherwise} "
          f"(addresses relative to the first segment)")


if __name__ == "__main__":
    main()
