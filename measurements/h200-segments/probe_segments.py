"""Which cudaMalloc segments a workload creates, in order, and why.

Runs a few workloads under torch.cuda.memory._record_memory_history and
writes, per workload, every `segment_alloc` event (size and the innermost
model/torch frame that asked for it) plus the allocations of at least 1 MiB
(size, action, frame) and the final segment table. The core's replay prints
the same list (`cargo run --example segments`), so the two can be compared
line by line.

Usage on the GPU box:  python3 probe_segments.py OUT_DIR
"""
import gc
import json
import sys
import time

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "."


def frame_of(frames):
    """Innermost frame inside transformers/torchvision/torch.nn code."""
    for f in frames or []:
        name = f.get("filename", "")
        if any(k in name for k in ("transformers/", "torchvision/", "torch/nn/", "torch/optim/", "cache_utils")):
            return f"{name.split('site-packages/')[-1]}:{f.get('line')}:{f.get('name')}"
    for f in frames or []:
        name = f.get("filename", "")
        if name.endswith(".py"):
            return f"{name.split('/')[-1]}:{f.get('line')}:{f.get('name')}"
    return "?"


def record(name, fn, out):
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    t0 = time.time()
    fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    events = snap["device_traces"][0]
    seg_events = []
    big = []
    for e in events:
        a = e["action"]
        if a in ("segment_alloc", "segment_free"):
            seg_events.append([a, e["size"], frame_of(e.get("frames"))])
        elif a in ("alloc", "free_completed") and e["size"] >= (1 << 20):
            big.append([a[0], e["size"], e["addr"], frame_of(e.get("frames")) if a == "alloc" else ""])
    segments = sorted(
        [[s["total_size"], sum(b["size"] for b in s["blocks"] if b["state"] != "active_allocated")] for s in snap["segments"]],
        reverse=True,
    )
    summary = {
        "case": name,
        "resident_before": before,
        "alloc_peak": torch.cuda.max_memory_allocated(),
        "reserved_peak": torch.cuda.max_memory_reserved(),
        "seconds": round(time.time() - t0, 3),
        "segment_events": seg_events,
        "final_segments_ge_100MiB": [s for s in segments if s[0] >= 100 << 20],
        "allocations_ge_1MiB": big[:6000],
    }
    out.write(json.dumps(summary) + "\n")
    out.flush()
    print(name, summary["alloc_peak"], summary["reserved_peak"], len(seg_events), "segment events", flush=True)


def llama_generate(out):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    # Warm the cuBLAS handle as the earlier cases of the public run did.
    with torch.no_grad():
        model.generate(torch.randint(0, 1000, (1, 128), device="cuda"), max_new_tokens=2, min_new_tokens=2, do_sample=False)

    def gen(b, s):
        ids = torch.randint(0, 128256, (b, s), device="cuda")

        def run():
            with torch.no_grad():
                model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
        return run

    record("llama8b_gen_b1_L32768", gen(1, 32768), out)
    del model
    gc.collect()
    torch.cuda.empty_cache()


def llama1b_eager(out):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                      attn_implementation="eager")
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    with torch.no_grad():
        model.generate(torch.randint(0, 1000, (1, 128), device="cuda"), max_new_tokens=2, min_new_tokens=2, do_sample=False)
    ids = torch.randint(0, 128256, (1, 4096), device="cuda")

    def run():
        with torch.no_grad():
            model.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
    record("llama1b_eager_gen_bf16_b1_L4096", run, out)
    del model
    gc.collect()
    torch.cuda.empty_cache()


def resnet(out):
    import torchvision

    with torch.device("cuda"):
        model = torchvision.models.resnet50()
    model.eval()
    x = torch.randn(64, 3, 224, 224, device="cuda")
    with torch.no_grad():
        model(x[:2])

    def run():
        with torch.no_grad():
            model(x)
    record("resnet50_inf_fp32_b64_r224", run, out)


if __name__ == "__main__":
    with open(f"{OUT}/segments.jsonl", "w") as out:
        for job in (llama_generate, llama1b_eager):
            try:
                job(out)
            except Exception as exc:  # keep the other probes
                print("failed", job.__name__, exc, flush=True)
