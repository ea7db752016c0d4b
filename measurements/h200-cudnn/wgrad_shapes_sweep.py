"""cuDNN's backward blocks of every ResNet convolution shape at the map
sizes ResNet gives images of 224 to 448 pixels.

As wgrad_sweep.py (one `aten.convolution_backward` call for the data
gradient, one for the weight gradient; the block = peak allocated during
the call minus allocated right after it, and the same in requested bytes), for the convolutions after the
stem of torchvision's ResNet-18/34 (3x3, and 3x3/2 with 1x1/2 downsamples)
and ResNet-50/101/152 (1x1 and 3x3 bottlenecks, 3x3/2 and 1x1/2), on the
maps of 224, 256, 288, 320, 384 and 448-pixel images, batches 32 to 256
(or those in SWEEP_BATCHES), bf16, fp16 and fp32, NCHW and channels_last.

usage: [SWEEP_BATCHES=16,48,...] python3 wgrad_shapes_sweep.py OUT.jsonl
"""
import sys

import torch

from shape_sweep import block, sweep


def measure(row, x, w, fmt, stride, pad):
    n, out_edge = row["batch"], row["out_hw"]
    g = torch.randn(n, row["cout"], out_edge, out_edge, device="cuda",
                    dtype=x.dtype).contiguous(memory_format=fmt)
    for phase, mask in (("data", [True, False, False]), ("weight", [False, True, False])):
        block(row, phase, lambda: torch.ops.aten.convolution_backward(
            g, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, mask))


sweep(open(sys.argv[1], "w"), measure)
