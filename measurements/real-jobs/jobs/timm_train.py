"""Train a timm image model for a few steps on random images, bf16 autocast
(or fp32 with `--precision fp32`; fp16 autocast with a GradScaler, as timm's
train.py runs `--amp`, with `--precision amp_fp16`), optionally accumulating
gradients over `--accum` batches per optimizer step.

    python timm_train.py --model resnet50 --batch 128 --image-size 224 --opt sgd
    python timm_train.py --model resnet50 --batch 128 --image-size 224 --opt sgd --channels-last
    python timm_train.py --model vit_base_patch16_224 --batch 32 --image-size 224 --opt adamw
"""
import argparse
import json

import timm
import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--opt", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--precision", choices=["amp_bf16", "amp_fp16", "fp32"], default="amp_bf16")
    p.add_argument("--accum", type=int, default=1, help="batches whose gradients one step applies")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--reuse-batch", action="store_true",
                   help="make one batch before the loop and train on it every step")
    args = p.parse_args()

    device = torch.device("cuda")
    model = timm.create_model(args.model, pretrained=False, num_classes=1000).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if args.opt == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    model.train()
    def batch():
        images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
        if args.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, torch.randint(0, 1000, (args.batch,), device=device)

    reused = batch() if args.reuse_batch else None
    half = torch.float16 if args.precision == "amp_fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda") if args.precision == "amp_fp16" else None
    for step in range(args.steps):
        for _ in range(args.accum):
            images, targets = reused or batch()
            with torch.autocast("cuda", dtype=half, enabled=args.precision != "fp32"):
                loss = F.cross_entropy(model(images), targets) / args.accum
            if scaler is None:
                loss.backward()
            else:
                scaler.scale(loss).backward()
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}", flush=True)

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
