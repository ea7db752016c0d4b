"""cuDNN's blocks for the first convolution of a network (3 input channels)
over batch, image size, dtype and layout.

For ResNet's 7x7/2 stem, MobileNetV2's 3x3/2 stem and ViT's 16x16/16
patch embeddings, calls `aten.convolution` (forward) and
`aten.convolution_backward` for the weight gradient only (a network's
images need no gradient), each twice (the second after any lazy setup),
and records the block cuDNN took from the caching allocator: the peak
allocated during the call minus what is allocated right after it.

usage: python3 stem_sweep.py OUT.jsonl [SHAPES DTYPES BATCHES]
(SHAPES, DTYPES and BATCHES comma-separated, e.g. `vit_s16_patch fp32 512,1024`;
default: every shape, dtype and batch below)
"""
import json
import sys

import torch

out = open(sys.argv[1], "w")
aten = torch.ops.aten
print(json.dumps({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                  "gpu": torch.cuda.get_device_name()}), file=out, flush=True)
# name, cout, kernel, stride, padding
shapes = [("resnet_stem", 64, 7, 2, 3), ("mobilenetv2_stem", 32, 3, 2, 1),
          ("vit_b16_patch", 768, 16, 16, 0), ("vit_s16_patch", 384, 16, 16, 0)]
dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
batches = (16, 32, 64, 128, 256)
if len(sys.argv) > 2:
    shapes = [s for s in shapes if s[0] in sys.argv[2].split(",")]
    dtypes = {k: v for k, v in dtypes.items() if k in sys.argv[3].split(",")}
    batches = tuple(int(b) for b in sys.argv[4].split(","))


def block(call):
    peak_minus_after = 0
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        res = call()
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated()
        peak_minus_after = torch.cuda.max_memory_allocated() - after
        del res
    return peak_minus_after


for name, cout, k, stride, pad in shapes:
    for dname, dtype in dtypes.items():
        for channels_last in (False, True):
            fmt = torch.channels_last if channels_last else torch.contiguous_format
            w = torch.randn(cout, 3, k, k, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
            for image in (224, 288):
                for n in batches:
                    x = torch.randn(n, 3, image, image, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
                    y = aten.convolution(x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1)
                    g = torch.randn_like(y)
                    row = {"shape": name, "cout": cout, "k": k, "stride": stride, "dtype": dname,
                           "channels_last": channels_last, "image": image, "batch": n,
                           "output_bytes": y.numel() * y.element_size()}
                    del y
                    row["forward"] = block(lambda: aten.convolution(
                        x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1))
                    row["weight"] = block(lambda: aten.convolution_backward(
                        g, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1,
                        [False, True, False]))
                    print(json.dumps(row), file=out, flush=True)
                    del x, g
                    torch.cuda.empty_cache()
print("done", flush=True)
