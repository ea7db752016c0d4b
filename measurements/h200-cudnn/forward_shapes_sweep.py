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
import sys

import torch

from shape_sweep import block, sweep


def measure(row, x, w, fmt, stride, pad):
    block(row, "forward", lambda: torch.ops.aten.convolution(
        x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1))


sweep(open(sys.argv[1], "w"), measure)
