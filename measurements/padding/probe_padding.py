"""Does a padded batch (an attention mask with zeros) change the peak?

Llama-3.2-1B (random weights, SDPA) in fresh processes, each job three
ways: no attention mask, an all-ones mask, and a left-padded batch (the
first sequence's first 256 tokens masked out). Prints one JSON line per
run: allocated and reserved peaks, and the allocation sizes (rounded
blocks, from `_record_memory_history`) that the run made and the
unmasked run did not.

  python3 probe_padding.py            # runs every job and variant, each in a subprocess
  python3 probe_padding.py JOB MASK   # one run (train | generate | forward; none | ones | padded)
"""
import collections
import json
import subprocess
import sys

JOBS = {
    "train": dict(batch=8, seq=2048),
    "generate": dict(batch=8, seq=2048, new_tokens=16),
    "forward": dict(batch=8, seq=4096),
}


def one(job, mask_kind):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.cuda.set_device(0)
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                      rope_theta=500000.0, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    spec = JOBS[job]
    b, s = spec["batch"], spec["seq"]
    dtype = torch.float32 if job == "train" else torch.bfloat16
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(dtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(1, 128000, (b, s), device="cuda", generator=g)
    mask = None
    if mask_kind in ("ones", "padded"):
        mask = torch.ones((b, s), dtype=torch.long, device="cuda")
        if mask_kind == "padded":
            mask[0, :256] = 0
            ids[0, :256] = 0
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000)
    if job == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    elif job == "generate":
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=spec["new_tokens"],
                           min_new_tokens=spec["new_tokens"], do_sample=False)
    else:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    sizes = collections.Counter()
    for trace in snap.get("device_traces", []):
        for e in trace:
            if e["action"] == "alloc":
                sizes[e["size"]] += 1
    out = dict(job=job, mask=mask_kind, batch=b, seq_len=s, torch=torch.__version__,
               alloc_peak=torch.cuda.max_memory_allocated(), reserved_peak=torch.cuda.max_memory_reserved(),
               alloc_sizes={str(k): v for k, v in sorted(sizes.items())})
    print("PADDING " + json.dumps(out), flush=True)


def main():
    if len(sys.argv) == 3:
        one(sys.argv[1], sys.argv[2])
        return
    for job in JOBS:
        runs = {}
        for kind in ("none", "ones", "padded"):
            p = subprocess.run([sys.executable, __file__, job, kind], capture_output=True, text=True)
            line = [x for x in p.stdout.splitlines() if x.startswith("PADDING ")]
            if not line:
                print(json.dumps(dict(job=job, mask=kind, error=p.stderr[-2000:])), flush=True)
                continue
            runs[kind] = json.loads(line[0][len("PADDING "):])
        base = dict(runs["none"]["alloc_sizes"]) if "none" in runs else {}
        for kind, r in runs.items():
            sizes = r.pop("alloc_sizes")
            keys = set(sizes) | set(base)
            extra = {k: sizes.get(k, 0) - base.get(k, 0) for k in keys if sizes.get(k, 0) != base.get(k, 0)}
            r["sizes_differing_from_none"] = dict(sorted(extra.items(), key=lambda kv: -int(kv[0]))[:40])
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
