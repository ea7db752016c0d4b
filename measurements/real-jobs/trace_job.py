"""Runs a job script with torch's allocation history on and writes a summary of it.

    python3 trace_job.py --out NAME.trace.json -- jobs/trainer_llama.py --batch 4 --seq-len 1024

The job runs unchanged (runpy, as __main__); torch.cuda.memory._record_memory_history
records every allocation and free of the caching allocator with its Python stack.
At exit the history is reduced to: the allocated and reserved peaks, the
allocation that set the allocated peak, the blocks live at that moment grouped by
the innermost frame outside torch (file:line and function), the segments cached
at the reserved peak, and a downsampled timeline of allocated and reserved bytes.
The raw history is not kept (it can be hundreds of MB).
"""
import argparse
import gzip
import json
import os
import runpy
import sys
import time
from collections import defaultdict

import torch

SKIP = ("site-packages" + os.sep + "torch" + os.sep, os.sep + "contextlib.py", os.sep + "functools.py", "<frozen", "<eval_with_key>")


def site(frames, depth=2):
    """The innermost frames outside torch and the standard library's wrappers."""
    out = []
    for f in frames or []:
        name = f.get("filename", "?")
        if any(s in name for s in SKIP) or name.startswith("??"):
            continue
        parts = name.split(os.sep)
        short = os.sep.join(parts[-2:])
        out.append(f"{short}:{f.get('line', 0)} {f.get('name', '')}")
        if len(out) == depth:
            break
    return " < ".join(out) if out else "(torch internals / C++)"


def innermost(frames):
    for f in frames or []:
        name = f.get("filename", "?")
        if name.startswith("??"):
            continue
        return f"{os.sep.join(name.split(os.sep)[-2:])}:{f.get('line', 0)} {f.get('name', '')}"
    return "(no python frame)"


def summarise(snapshot, wall_s):
    events = [e for dev in snapshot["device_traces"] for e in dev]
    live = {}
    segments = {}
    alloc = reserved = 0
    peak_alloc = peak_res = 0
    peak_alloc_i = peak_res_i = -1
    peak_live = None
    peak_segments = None
    timeline = []
    step = max(1, len(events) // 4000)
    for i, e in enumerate(events):
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e
            alloc += e["size"]
            if alloc > peak_alloc:
                peak_alloc, peak_alloc_i = alloc, i
                peak_live = None  # materialised lazily below
        elif a == "free_completed":
            b = live.pop(e["addr"], None)
            if b is not None:
                alloc -= b["size"]
        elif a in ("segment_alloc", "segment_map"):
            segments[e["addr"]] = e
            reserved += e["size"]
            if reserved > peak_res:
                peak_res, peak_res_i = reserved, i
                peak_segments = None
        elif a in ("segment_free", "segment_unmap"):
            s = segments.pop(e["addr"], None)
            if s is not None:
                reserved -= s["size"]
        if i % step == 0:
            timeline.append([i, alloc, reserved])
    # Second pass: the live blocks at the allocated peak and the segments at the reserved peak.
    live, segments = {}, {}
    alloc_at_res_peak = segs_at_alloc_peak = None
    for i, e in enumerate(events):
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e
        elif a == "free_completed":
            live.pop(e["addr"], None)
        elif a in ("segment_alloc", "segment_map"):
            segments[e["addr"]] = e
        elif a in ("segment_free", "segment_unmap"):
            segments.pop(e["addr"], None)
        if i == peak_alloc_i:
            peak_live = list(live.values())
            segs_at_alloc_peak = sum(s["size"] for s in segments.values())
        if i == peak_res_i:
            peak_segments = list(segments.values())
            alloc_at_res_peak = sum(b["size"] for b in live.values())
    groups = defaultdict(lambda: [0, 0, []])
    for b in peak_live or []:
        g = groups[site(b.get("frames"))]
        g[0] += b["size"]
        g[1] += 1
        if len(g[2]) < 6:
            g[2].append(b["size"])
    by_site = sorted(({"site": k, "bytes": v[0], "blocks": v[1], "sizes": v[2]} for k, v in groups.items()),
                     key=lambda r: -r["bytes"])
    big = sorted(peak_live or [], key=lambda b: -b["size"])[:25]
    e = events[peak_alloc_i] if peak_alloc_i >= 0 else {}
    seg_sizes = defaultdict(lambda: [0, 0])
    seg_sites = defaultdict(lambda: [0, 0])
    for s in peak_segments or []:
        key = (s["size"], s.get("stream", 0))
        seg_sizes[key][0] += 1
        seg_sizes[key][1] += s["size"]
        g = seg_sites[site(s.get("frames"), 3)]
        g[0] += 1
        g[1] += s["size"]
    return {
        "events": len(events),
        "wall_s": round(wall_s, 3),
        "allocated_peak": peak_alloc,
        "reserved_peak": peak_res,
        "torch_max_memory_allocated": torch.cuda.max_memory_allocated(),
        "torch_max_memory_reserved": torch.cuda.max_memory_reserved(),
        "peak_event_index": peak_alloc_i,
        "peak_alloc": {"size": e.get("size"), "site": site(e.get("frames"), 4),
                       "innermost": innermost(e.get("frames"))},
        "reserved_at_allocated_peak": segs_at_alloc_peak,
        "live_at_peak_by_site": by_site[:40],
        "largest_live_at_peak": [{"size": b["size"], "stream": b.get("stream", 0), "site": site(b.get("frames"), 3)}
                                 for b in big],
        "allocated_at_reserved_peak": alloc_at_res_peak,
        "segments_at_reserved_peak_by_site": sorted(({"site": k, "count": v[0], "bytes": v[1]}
                                                     for k, v in seg_sites.items()), key=lambda r: -r["bytes"])[:25],
        "segments_at_reserved_peak": sorted(({"size": k[0], "stream": k[1], "count": v[0], "bytes": v[1]}
                                             for k, v in seg_sizes.items()), key=lambda r: -r["bytes"])[:40],
        "timeline_event_alloc_reserved": timeline,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--max-entries", type=int, default=2_000_000)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    torch.cuda.memory._record_memory_history(max_entries=a.max_entries, stacks="python")
    sys.argv = [a.script] + args
    t0 = time.perf_counter()
    try:
        runpy.run_path(a.script, run_name="__main__")
    finally:
        wall = time.perf_counter() - t0
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        summary = summarise(snap, wall)
        opener = gzip.open if a.out.endswith(".gz") else open
        with opener(a.out, "wt") as f:
            json.dump(summary, f, indent=1)
        print(f"trace: {summary['events']} events, allocated peak {summary['allocated_peak']}, "
              f"reserved peak {summary['reserved_peak']}, at {summary['peak_alloc']['site']}", flush=True)


if __name__ == "__main__":
    main()
