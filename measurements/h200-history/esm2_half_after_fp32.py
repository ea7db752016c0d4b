"""ESM-2 650M inference in half precision in a process that ran it in fp32
first and then cast the model in place (`model.half()`), against the same
fp16 inference in a fresh process.

    python3 esm2_half_after_fp32.py after   # fp32 b8 L512, .half(), fp16 cases
    python3 esm2_half_after_fp32.py fresh   # built in fp16, fp16 cases

Each case after gc.collect(), empty_cache() and reset_peak_memory_stats(),
as the calibration harness runs cases; one JSON line per stage with the
allocator's counters and segment table ([size, allocated] pairs).
"""
import gc
import json
import sys

import torch
from transformers import EsmConfig, EsmModel

CONFIG = dict(vocab_size=33, hidden_size=1280, num_hidden_layers=33, num_attention_heads=20,
              intermediate_size=5120, position_embedding_type="rotary", token_dropout=True,
              pad_token_id=1, mask_token_id=32, attn_implementation="sdpa")


def compact():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def segments():
    return sorted(([s["total_size"], sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")]
                   for s in torch.cuda.memory_snapshot()), reverse=True)


def emit(stage, **extra):
    print(json.dumps({"stage": stage, "allocated": torch.cuda.memory_allocated(),
                      "reserved": torch.cuda.memory_reserved(),
                      "alloc_peak": torch.cuda.max_memory_allocated(),
                      "reserved_peak": torch.cuda.max_memory_reserved(),
                      "segments": segments(), **extra}), flush=True)


def infer(model, batch, length, dtype_name):
    ids = torch.randint(4, 24, (batch, length), device="cuda")
    compact()
    resident = torch.cuda.memory_allocated()
    with torch.no_grad():
        out = model(input_ids=ids).last_hidden_state
    torch.cuda.synchronize()
    del out, ids
    emit(f"inference {dtype_name} b{batch} L{length}", resident_before=resident)


def main():
    mode = sys.argv[1]
    if mode == "after":
        with torch.device("cuda"):
            model = EsmModel(EsmConfig(**CONFIG), add_pooling_layer=False).eval()
        infer(model, 8, 512, "fp32")
        model.half()
        emit("after model.half()")
    else:
        with torch.device("cuda"), torch.autocast("cuda", enabled=False):
            torch.set_default_dtype(torch.float16)
            model = EsmModel(EsmConfig(**CONFIG), add_pooling_layer=False).eval()
            torch.set_default_dtype(torch.float32)
    for batch, length in ((8, 1024), (1, 1024), (8, 512)):
        infer(model, batch, length, "fp16")


if __name__ == "__main__":
    main()
