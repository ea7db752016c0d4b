"""Loads a Llama-3.1-8B-shaped model (random weights, from its config: nothing
is downloaded) one of the ways users do, then runs one forward pass under
`torch.no_grad()` with the logits of every position.

    python3 load_llama.py --load build_then_cast --seq-len 16384   # built on the GPU in fp32, `.to(bfloat16)`
    python3 load_llama.py --load build_in_dtype --seq-len 16384    # built on the GPU in bf16
    python3 load_llama.py --load cpu_then_move --seq-len 16384     # built on the CPU in bf16, `.to("cuda")`

Prints `HEADROOM_RESULT {...}` (the process's allocator peaks, no `seconds`:
the collector then measures the whole process) and `LOAD_DETAIL {...}`
(the peaks of the load and of the forward apart, and the reservation when
the load ends).
"""
import argparse
import json

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def config():
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
                       max_position_embeddings=131072, rope_theta=500000.0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--load", choices=["build_then_cast", "build_in_dtype", "cpu_then_move"], required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    a = p.parse_args()
    cfg = config()
    torch.cuda.init()
    if a.load == "build_then_cast":
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
        model = model.to(torch.bfloat16)
    elif a.load == "build_in_dtype":
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
        torch.set_default_dtype(torch.float32)
    else:
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).to("cuda")
    model.eval()
    torch.cuda.synchronize()
    load = {"alloc_peak": torch.cuda.max_memory_allocated(), "reserved_peak": torch.cuda.max_memory_reserved(),
            "allocated_after": torch.cuda.memory_allocated(), "reserved_after": torch.cuda.memory_reserved()}
    torch.cuda.reset_peak_memory_stats()
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq_len), device="cuda")
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    torch.cuda.synchronize()
    forward = {"alloc_peak": torch.cuda.max_memory_allocated(), "reserved_peak": torch.cuda.max_memory_reserved(),
               "logits": list(out.logits.shape), "logits_dtype": str(out.logits.dtype)}
    print("LOAD_DETAIL " + json.dumps({"load": a.load, "seq_len": a.seq_len, "after_load": load, "forward": forward}),
          flush=True)
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": max(load["alloc_peak"], forward["alloc_peak"]),
                                           "reserved_peak": max(load["reserved_peak"], forward["reserved_peak"])}),
          flush=True)


if __name__ == "__main__":
    main()
