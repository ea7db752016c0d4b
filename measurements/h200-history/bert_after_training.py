"""BERT-base masked-LM inference in a process that trained another BERT
before, as the public H200 set's BERT cases ran (their processes hold two
cuBLAS workspaces and no optimizer state when inference starts).

One process: build BertForMaskedLM(BertConfig()) on the GPU, train it
(amp bf16, AdamW, batch TRAIN_BATCH x TRAIN_LEN, two steps), delete it and
its optimizer, gc.collect() and empty_cache(); print the segments that
stay; build a second BertForMaskedLM on the GPU, and run fp32 inference
(all logits) at b32 L128 and b32 L512, each after gc.collect(),
empty_cache() and reset_peak_memory_stats() as the harness does. One JSON
line per stage.

    python3 bert_after_training.py TRAIN_BATCH TRAIN_LEN
"""
import gc
import json
import sys

import torch
from transformers import BertConfig, BertForMaskedLM


def segments():
    return sorted(([s["total_size"], sum(b["size"] for b in s["blocks"] if b["state"] == "active_allocated")]
                   for s in torch.cuda.memory_snapshot()), reverse=True)


def compact():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def emit(stage, **extra):
    print(json.dumps({"stage": stage, "allocated": torch.cuda.memory_allocated(),
                      "reserved": torch.cuda.memory_reserved(),
                      "alloc_peak": torch.cuda.max_memory_allocated(),
                      "reserved_peak": torch.cuda.max_memory_reserved(),
                      "segments": segments(), **extra}), flush=True)


def build():
    with torch.device("cuda"):
        return BertForMaskedLM(BertConfig(attn_implementation="sdpa"))


def main():
    train_batch, train_len = int(sys.argv[1]), int(sys.argv[2])
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, 30522, (train_batch, train_len), device="cuda")
    compact()
    for _ in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    emit("trained", train_batch=train_batch, train_len=train_len)
    del model, opt, ids, loss
    compact()
    emit("after deleting the trained model")
    model = build().eval()
    compact()
    emit("second model built")
    for batch, length in ((32, 128), (32, 512)):
        ids = torch.randint(0, 30522, (batch, length), device="cuda")
        compact()
        resident = torch.cuda.memory_allocated()
        with torch.no_grad():
            logits = model(input_ids=ids).logits
        torch.cuda.synchronize()
        del logits
        emit(f"inference b{batch} L{length}", resident_before=resident)
        del ids


if __name__ == "__main__":
    main()
