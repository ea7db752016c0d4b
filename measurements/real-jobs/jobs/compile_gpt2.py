"""A torch.compile'd training loop: GPT-2 (124M, random weights), AdamW, bf16 autocast.

    python compile_gpt2.py --batch 8 --seq-len 1024
"""
import argparse
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    model = GPT2LMHeadModel(GPT2Config()).to("cuda")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    compiled = torch.compile(model)

    for step in range(args.steps):
        ids = torch.randint(0, 50257, (args.batch, args.seq_len), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.3f}", flush=True)

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
