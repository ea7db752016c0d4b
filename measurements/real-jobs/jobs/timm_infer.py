"""Run a timm image model over random images for a few batches, inference
only (`model.eval()`, `torch.inference_mode()`), in the weights' dtype
(`--dtype fp32|fp16|bf16`: `model.to(dtype)`), NCHW or `--channels-last`.

    python timm_infer.py --model resnet50 --batch 256 --image-size 224 --dtype fp16 --channels-last
"""
import argparse
import json

import timm
import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default="fp16")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batches", type=int, default=3)
    args = p.parse_args()

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    device = torch.device("cuda")
    model = timm.create_model(args.model, pretrained=False, num_classes=1000).to(device, dtype).eval()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    with torch.inference_mode():
        for i in range(args.batches):
            images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device, dtype=dtype)
            if args.channels_last:
                images = images.contiguous(memory_format=torch.channels_last)
            top = model(images).argmax(dim=-1)
            print(f"batch {i}: first class {top[0].item()}", flush=True)

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
