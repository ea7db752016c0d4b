"""cuDNN's backward blocks of every ResNet convolution shape at the map
sizes ResNet gives images of 224 to 448 pixels.

As wgrad_sweep.py (one `aten.convolution_backward` call for the data
gradient, one for the weight gradient; the block = peak allocated during
the call minus allocated right after it, and the same in requested bytes), for the convolutions after the
stem of torchvision's ResNet-18/34 (3x3, and 3x3/2 with 1x1/2 downsamples)
and ResNet-50/101/152 (1x1 and 3x3 bottlenecks, 3x3/2 and 1x1/2), on the
maps of 224, 256, 288, 320, 384 and 448-pixel images, batches 32 to 256,
bf16, fp16 and fp32, NCHW and channels_last.

usage: python3 wgrad_shapes_sweep.py OUT.jsonl
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
                g = torch.randn(n, cout, out_edge, out_edge, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                row = {"cin": cin, "cout": cout, "k": k, "stride": stride, "hw": edge,
                       "out_hw": out_edge, "batch": n, "dtype": str(dtype).split(".")[-1],
                       "channels_last": channels_last}
                for phase, mask in (("data", [True, False, False]), ("weight", [False, True, False])):
                    for _ in range(2):  # the second call, after any lazy setup
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        before = torch.cuda.memory_allocated()
                        res = aten.convolution_backward(g, x, w, None, [stride, stride], [pad, pad],
                                                        [1, 1], False, [0, 0], 1, mask)
                        torch.cuda.synchronize()
                        after = torch.cuda.memory_allocated()
                        peak = torch.cuda.max_memory_allocated()
                        stats = torch.cuda.memory_stats()
                        del res
                    row[phase] = peak - after
                    row[phase + "_result"] = after - before
                    # Requested bytes, before the allocator's rounding (a
                    # block can carry up to 1 MiB of unsplit remainder).
                    row[phase + "_requested"] = (stats["requested_bytes.all.peak"]
                                                 - stats["requested_bytes.all.current"])
                print(json.dumps(row), file=out, flush=True)
                done += 1
                del x, g
            del w
            torch.cuda.empty_cache()
        print(f"{dtype} channels_last={channels_last}: {done} rows", flush=True)
print("done", flush=True)
