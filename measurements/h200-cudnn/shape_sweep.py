"""What the ResNet shape sweeps (wgrad_shapes_sweep.py,
forward_shapes_sweep.py) share: every convolution after the stem of
torchvision's ResNet-18/34/50/101/152 on the maps of 224 to 448-pixel
images, the batches, precisions and layouts they run each at, and how
one call's block is measured."""
import json
import os

import torch

images = [224, 256, 288, 320, 384, 448]


def shapes(image):
    """(cin, cout, k, stride, input edge) of ResNet's convolutions after the stem."""
    s = set()
    edge = image // 4
    widths = [64, 128, 256, 512]
    for stage, c in enumerate(widths):
        e = edge >> stage
        s.add((c, c, 3, 1, e))                      # basic and bottleneck 3x3
        if stage > 0:
            s.add((c // 2, c, 3, 2, 2 * e))         # basic block's 3x3/2
            s.add((c // 2, c, 1, 2, 2 * e))         # basic block's downsample
            s.add((c, c, 3, 2, 2 * e))              # bottleneck's 3x3/2 (v1.5)
            s.add((2 * c, c, 1, 1, 2 * e))          # bottleneck's first 1x1, on the larger map
            s.add((2 * c, 4 * c, 1, 2, 2 * e))      # bottleneck's downsample
        s.add((4 * c, c, 1, 1, e))                  # bottleneck 1x1 in
        s.add((c, 4 * c, 1, 1, e))                  # bottleneck 1x1 out
    s.add((64, 64, 1, 1, edge))                     # layer1.0.conv1
    s.add((64, 256, 1, 1, edge))                    # layer1.0.downsample
    return sorted(s)


# The grid the tables were first built on; SWEEP_BATCHES=48,96,... measures
# other batches with the same shapes, precisions and layouts.
batches = [int(b) for b in os.environ.get("SWEEP_BATCHES", "32,64,128,256").split(",")]


def all_shapes():
    return sorted({s for image in images for s in shapes(image)})


def sweep(out, measure):
    """Writes the header line, then for every shape, batch, precision and
    layout one row: the shape, and what `measure(row, x, w, fmt, stride,
    pad)` adds to it. Prints progress per precision and layout."""
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
                    measure(row, x, w, fmt, stride, pad)
                    print(json.dumps(row), file=out, flush=True)
                    done += 1
                    del x
                del w
                torch.cuda.empty_cache()
            print(f"{dtype} channels_last={channels_last}: {done} rows", flush=True)
    print("done", flush=True)


def block(row, phase, call):
    """Runs `call` twice (the second time after any lazy setup) and records
    in `row` the block it took (peak allocated during the call minus
    allocated right after it), its result, and the block in requested
    bytes, before the allocator's rounding (a block can carry up to 1 MiB
    of unsplit remainder)."""
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        result = call()
        torch.cuda.synchronize()
        after = torch.cuda.memory_allocated()
        peak = torch.cuda.max_memory_allocated()
        stats = torch.cuda.memory_stats()
        del result
    row[phase] = peak - after
    row[phase + "_result"] = after - before
    row[phase + "_requested"] = (stats["requested_bytes.all.peak"]
                                 - stats["requested_bytes.all.current"])
