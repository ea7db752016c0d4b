"""cuDNN's forward blocks of every ResNet convolution shape at the map
sizes ResNet gives images of 224 to 448 pixels: the forward twin of
wgrad_shapes_sweep.py (the same shapes, maps, batches, precisions and
layouts).

One `aten.convolution` call per row (the second of two, after any lazy
setup); the block = peak allocated during the call minus allocated right
after it (the output then exists), and the same in requested bytes
(before the allocator's rounding).

usage: python3 forward_shapes_sweep.py OUT.jsonl
"""
import json
import sys

import torch

from wgrad_shapes_sweep_shapes import all_shapes, batches

out = open(sys.argv[1], "w")
aten = torch.ops.aten
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                  "gpu": torch.cuda.get_device_name()}), file=out, flush=True)
done = 0
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for channels_last in (True, False):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        for cin, cout, k, stride, edge in all_shapes():
            pad = k // 2
            out_edge = (edge + 2 * pad - k) // stride + 1
            w = torch.randn(cout, cin, k, k, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
            for n in batches:
                x = torch.randn(n, cin, edge, edge, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                row = {"cin": cin, "cout": cout, "k": k, "stride": stride, "hw": edge,
                       "out_hw": out_edge, "batch": n, "dtype": str(dtype).split(".")[-1],
                       "channels_last": channels_last}
                for _ in range(2):
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    before = torch.cuda.memory_allocated()
                    y = aten.convolution(x, w, None, [stride, stride], [pad, pad], [1, 1],
                                         False, [0, 0], 1)
                    torch.cuda.synchronize()
                    after = torch.cuda.memory_allocated()
                    peak = torch.cuda.max_memory_allocated()
                    stats = torch.cuda.memory_stats()
                    del y
                row["forward"] = peak - after
                row["forward_result"] = after - before
                row["forward_requested"] = (stats["requested_bytes.all.peak"]
                                            - stats["requested_bytes.all.current"])
                print(json.dumps(row), file=out, flush=True)
                done += 1
                del x
            del w
            torch.cuda.empty_cache()
        print(f"{dtype} channels_last={channels_last}: {done} rows", flush=True)
print("done", flush=True)
