"""`generate()` on a bitsandbytes-quantized model: a bf16 checkpoint loaded
with `from_pretrained(quantization_config=BitsAndBytesConfig(...))`, greedy
decoding of a fixed number of new tokens after a random prompt.

    python3 quant_generate.py --arch llama8b --quant nf4 --batch 4 --prompt-len 2048 --new-tokens 64

Prints `HEADROOM_RESULT {...}` for the collector, and appends one JSON line
of detail (the load's figures) to $QLORA_DETAIL_FILE when it is set.
"""
import argparse
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import checkpoint


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="llama8b")
    p.add_argument("--quant", choices=["nf4", "fp4", "int8"], default="nf4")
    p.add_argument("--no-double-quant", action="store_true")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=2048)
    p.add_argument("--new-tokens", type=int, default=64)
    args = p.parse_args()
    if args.quant == "int8":
        bnb = BitsAndBytesConfig(load_in_8bit=True)
    else:
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=args.quant,
                                 bnb_4bit_use_double_quant=not args.no_double_quant,
                                 bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(checkpoint(args.arch), quantization_config=bnb,
                                                 dtype=torch.bfloat16, device_map={"": 0})
    torch.cuda.synchronize()
    detail = {"arch": args.arch, "quant": args.quant, "batch": args.batch, "prompt_len": args.prompt_len,
              "load": {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                       "alloc_peak": torch.cuda.max_memory_allocated()}}
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.prompt_len), generator=g).cuda()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0)
    assert out.shape[1] == args.prompt_len + args.new_tokens
    torch.cuda.synchronize()
    detail["end"] = {"alloc_peak": torch.cuda.max_memory_allocated(), "reserved_peak": torch.cuda.max_memory_reserved()}
    if os.environ.get("QLORA_DETAIL_FILE"):
        with open(os.environ["QLORA_DETAIL_FILE"], "a") as f:
            f.write(json.dumps(detail) + "\n")
    print("QLORA_DETAIL " + json.dumps(detail), flush=True)
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": sum(q.numel() for q in model.parameters())}), flush=True)


if __name__ == "__main__":
    main()
