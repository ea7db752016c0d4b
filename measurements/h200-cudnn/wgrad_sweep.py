"""cuDNN's backward workspaces of single convolutions over the batch.

For each ResNet 3x3 convolution shape (64 to 512 channels on 56x56 to 7x7
maps, stride 1) and each batch, calls `aten.convolution_backward` once for
the data gradient and once for the weight gradient, in bf16 and fp32,
NCHW and channels_last, and records the block cuDNN took from the caching
allocator: the peak allocated during the call minus what is allocated
right after it (the gradient stays, the workspace is gone).

usage: python3 wgrad_sweep.py OUT.jsonl [DTYPES]   (DTYPES: comma-separated
of bf16, fp16, fp32; default bf16,fp32)
"""
import json
import sys

import torch

out = open(sys.argv[1], "w")
shapes = [(64, 56), (128, 28), (256, 14), (512, 7)]
batches = [8, 16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512]
aten = torch.ops.aten
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                  "gpu": torch.cuda.get_device_name()}), file=out, flush=True)
names = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
for dtype in [names[d] for d in (sys.argv[2] if len(sys.argv) > 2 else "bf16,fp32").split(",")]:
    for channels_last in (True, False):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        for c, hw in shapes:
            w = torch.randn(c, c, 3, 3, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
            for n in batches:
                x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                g = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                row = {"c": c, "hw": hw, "k": 3, "stride": 1, "batch": n,
                       "dtype": str(dtype).split(".")[-1], "channels_last": channels_last}
                for phase, mask in (("data", [True, False, False]), ("weight", [False, True, False])):
                    for _ in range(2):  # the second call, after any lazy setup
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats()
                        before = torch.cuda.memory_allocated()
                        res = aten.convolution_backward(g, x, w, None, [1, 1], [1, 1], [1, 1],
                                                        False, [0, 0], 1, mask)
                        torch.cuda.synchronize()
                        after = torch.cuda.memory_allocated()
                        peak = torch.cuda.max_memory_allocated()
                        del res
                    row[phase] = peak - after
                    row[phase + "_result"] = after - before
                print(json.dumps(row), file=out, flush=True)
                del x, g
            del w
            torch.cuda.empty_cache()
print("done", flush=True)
