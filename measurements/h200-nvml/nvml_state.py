"""NVML's view of GPU 0: memory (v1 and v2) and the compute processes, as JSON.

`python3 nvml_state.py [LABEL]` prints one line: {"label", "total", "used",
"free", "v2_reserved", "v2_used", "processes": [[pid, used_bytes], ...]}.
"""
import json, sys

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
m = pynvml.nvmlDeviceGetMemoryInfo(h)
out = {"label": sys.argv[1] if len(sys.argv) > 1 else "", "total": m.total, "used": m.used,
       "free": m.free}
try:
    m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    out.update(v2_reserved=m2.reserved, v2_used=m2.used, v2_free=m2.free)
except Exception as e:  # noqa: BLE001 - older pynvml or driver
    out["v2_error"] = str(e)
out["processes"] = [[p.pid, p.usedGpuMemory] for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
print(json.dumps(out), flush=True)
