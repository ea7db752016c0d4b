"""Turns the allocator-history pickles of `headroom_measure.py --snapshot`
into compact JSON lines the core's replay can be compared with.

Per case: every segment event (action, size, frame), every out-of-memory
event (O, the request, the device's free bytes), every allocation and
free of at least MIN_BYTES (default 256 KiB; 0 keeps the small pool's too)
(action, size, address, frame), and the final segment table (sizes; and
addresses with the blocks still allocated in each). Frames are the innermost model/torch frame (as
`headroom_measure.frame_label` names them).

usage: python3 compact_snapshots.py PICKLE_DIR OUT.jsonl [MIN_BYTES]
"""
import glob
import json
import os
import pickle
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "calibration-collector", "python"))
import headroom_measure as h  # noqa: E402

MIN = int(sys.argv[3]) if len(sys.argv) > 3 else 256 << 10

with open(sys.argv[2], "w") as out:
    for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.pickle"))):
        with open(path, "rb") as f:
            snap = pickle.load(f)
        trace = snap["device_traces"][0]
        events = []
        for e in trace:
            a = e["action"]
            if a in ("segment_alloc", "segment_free"):
                events.append(["S" if a == "segment_alloc" else "s", e["size"], e.get("addr", 0), h.frame_label(e.get("frames"))])
            elif a == "oom":
                # A failed request: its size and the device's free bytes then.
                events.append(["O", e["size"], e.get("device_free", 0), ""])
            elif a in ("alloc", "free_completed") and e["size"] >= MIN:
                events.append(["A" if a == "alloc" else "F", e["size"], e["addr"], h.frame_label(e.get("frames")) if a == "alloc" else ""])
        segments = sorted(([s["total_size"], sum(b["size"] for b in s["blocks"] if b["state"] != "active_allocated")]
                           for s in snap["segments"]), reverse=True)
        # Where each segment lies and what is still allocated in it when the
        # case ends (what the next case of the process finds after the cache
        # is emptied): [address, size, [[block address, size], ...]].
        table = sorted([s["address"], s["total_size"],
                        [[b["address"], b["size"]] for b in s["blocks"] if b["state"] == "active_allocated"]]
                       for s in snap["segments"])
        case = os.path.basename(path)[: -len(".pickle")]
        out.write(json.dumps({"case": case, "events": events, "final_segments": segments,
                              "final_segment_table": table}) + "\n")
        print(case, len(trace), "trace events,", len(events), "kept", flush=True)
