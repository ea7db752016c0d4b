"""Writes a random bf16 checkpoint of each named shape with
`save_pretrained`, once, so that the jobs load it with `from_pretrained` as
users load a model from the Hub.

    python3 make_checkpoint.py llama1b llama8b qwen7b
"""
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import checkpoint, config


def main():
    for arch in sys.argv[1:]:
        out = checkpoint(arch)
        if os.path.exists(os.path.join(out, "config.json")):
            continue
        start = time.time()
        cfg = config(arch)
        cfg.dtype = torch.bfloat16
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        model.save_pretrained(out, max_shard_size="5GB")
        del model
        torch.cuda.empty_cache()
        print(f"{arch}: written to {out} in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
