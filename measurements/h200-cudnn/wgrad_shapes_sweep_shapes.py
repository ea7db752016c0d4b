"""The convolution shapes the ResNet sweeps measure (wgrad_shapes_sweep.py,
forward_shapes_sweep.py): every convolution after the stem of
torchvision's ResNet-18/34/50/101/152 on the maps of 224 to 448-pixel
images, and the batches."""

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


batches = [32, 64, 128, 256]


def all_shapes():
    return sorted({s for image in images for s in shapes(image)})
