"""Do beam search and sampling change a generation's peak, and which tensors do they add?

Llama-3.2-1B-shaped (16 layers, random weights, SDPA, bf16) generations
of 2,048-token prompts and 16 new tokens, each in a fresh process:
greedy (batch 8 and batch 2), beam search with 4 beams over 2 prompts
(8 sequences), and sampling with transformers' defaults (top_k 50) and
with Llama 3's (temperature 0.6, top_p 0.9, top_k 50). Prints one JSON
line per run: allocated and reserved peaks, and the block sizes whose
allocation counts differ from the greedy batch-8 run. With `--trace
DIR`, the beam and sampling runs also write every allocation and free of
at least 256 KiB, in order, with the innermost Python frames outside
torch/nn/modules, to DIR/VARIANT.events.txt.

  python3 probe_search.py [--trace DIR]     # every variant, each in a subprocess
  python3 probe_search.py VARIANT [DIR]     # one run
"""
import collections
import json
import os
import subprocess
import sys

VARIANTS = {
    "greedy_b8": dict(batch=8),
    "greedy_b2": dict(batch=2),
    "beams4_b2": dict(batch=2, num_beams=4),
    "sample_defaults_b8": dict(batch=8, do_sample=True, temperature=1.0, top_k=50, top_p=1.0),
    "sample_llama3_b8": dict(batch=8, do_sample=True, temperature=0.6, top_k=50, top_p=0.9),
}
SEQ, NEW = 2048, 16


def frames(entry, keep=3):
    out = []
    for f in entry.get("frames", []):
        name = f.get("filename", "")
        if not name.endswith(".py") or "/torch/nn/modules/" in name or "/torch/utils/" in name:
            continue
        out.append(f"{os.path.basename(name)}:{f.get('line')}:{f.get('name')}")
        if len(out) == keep:
            break
    return " < ".join(out)


def one(variant, trace_dir):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.cuda.set_device(0)
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                      rope_theta=500000.0, pad_token_id=0, eos_token_id=128001, bos_token_id=128000)
    cfg._attn_implementation = "sdpa"
    spec = dict(VARIANTS[variant])
    b = spec.pop("batch")
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(1, 128000, (b, SEQ), device="cuda", generator=g)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    kwargs = dict(do_sample=False)
    kwargs.update(spec)
    with torch.no_grad():
        out = model.generate(input_ids=ids, max_new_tokens=NEW, min_new_tokens=NEW, **kwargs)
    assert out.shape == (b, SEQ + NEW), out.shape
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    sizes = collections.Counter()
    for t in snap.get("device_traces", []):
        for e in t:
            if e["action"] == "alloc":
                sizes[e["size"]] += 1
    if trace_dir and variant != "greedy_b2":
        with open(os.path.join(trace_dir, f"{variant}.events.txt"), "w") as f:
            f.write(f"# {variant} b{b} L{SEQ} + {NEW}, 16 layers, {spec}; torch {torch.__version__}\n")
            for t in snap["device_traces"]:
                for e in t:
                    if e["action"] in ("alloc", "free_requested") and e["size"] >= 256 << 10:
                        f.write(f"{'A' if e['action'] == 'alloc' else 'F'} {e['size']} {e['addr']} {frames(e)}\n")
                    elif e["action"] == "segment_alloc":
                        f.write(f"S {e['size']} {e['addr']} {frames(e)}\n")
    out = dict(variant=variant, batch=b, seq_len=SEQ, new_tokens=NEW, generate_kwargs=kwargs,
               torch=torch.__version__, alloc_peak=torch.cuda.max_memory_allocated(),
               reserved_peak=torch.cuda.max_memory_reserved(),
               alloc_sizes={str(k): v for k, v in sorted(sizes.items())})
    print("SEARCH " + json.dumps(out), flush=True)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] in VARIANTS:
        one(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
        return
    trace_dir = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--trace" else None
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    runs = {}
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, variant] + ([trace_dir] if trace_dir else [])
        p = subprocess.run(cmd, capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("SEARCH ")]
        if not line:
            print(json.dumps(dict(variant=variant, error=p.stderr[-3000:])), flush=True)
            continue
        runs[variant] = json.loads(line[0][len("SEARCH "):])
    base = dict(runs["greedy_b8"]["alloc_sizes"]) if "greedy_b8" in runs else {}
    for r in runs.values():
        sizes = r.pop("alloc_sizes")
        keys = set(sizes) | set(base)
        extra = {k: sizes.get(k, 0) - base.get(k, 0) for k in keys if sizes.get(k, 0) != base.get(k, 0)}
        r["sizes_differing_from_greedy_b8"] = dict(sorted(extra.items(), key=lambda kv: -int(kv[0]))[:60])
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
