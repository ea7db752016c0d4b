"""What a Linear's backward allocates, op by op, on the GPU.

Records `torch.cuda.memory._record_memory_history` over one backward of an
nn.Linear (after a warm-up backward, so cuBLAS handles and the autograd
thread exist) for several token counts, widths, precisions and with/without
bias; with C++ stacks for a few, to name the kernel behind each transient.
Then the same for one ViT-B/16 training step (torchvision, autocast bf16),
keeping the backward transients of at least 64 MiB (the autograd thread has no Python frames).

Usage: python3 probe_linear_backward.py OUT_DIR
"""
import json
import sys

import torch

OUT = sys.argv[1]
DEV = "cuda"


def frames(e, keep=14):
    out = []
    for f in e.get("frames", []):
        name = f.get("name", "")
        if any(s in name for s in ("at::", "cublas", "Cublas", "cudnn", "torch::autograd", "c10::")) or f.get("filename", "").endswith(".py"):
            out.append(f"{f.get('filename', '').split('/')[-1]}:{f.get('line', 0)}:{name[:110]}")
        if len(out) >= keep:
            break
    return out


def record(fn, stacks):
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=400000)
    fn()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    return snap["device_traces"][0]


def events(trace, with_frames, min_size=0):
    out = []
    for e in trace:
        if e["action"] in ("alloc", "free_requested", "segment_alloc") and e["size"] >= min_size:
            item = {"a": e["action"][0].upper() if e["action"] != "segment_alloc" else "S", "size": e["size"], "addr": e["addr"]}
            if with_frames and e["action"] != "free_requested":
                item["frames"] = frames(e)
            out.append(item)
    return out


def linear_case(n, fin, fout, bias, mode, stacks):
    dtype = torch.bfloat16 if mode == "bf16" else torch.float32
    lin = torch.nn.Linear(fin, fout, bias=bias, device=DEV, dtype=dtype)
    x = torch.randn(n, fin, device=DEV, dtype=dtype, requires_grad=True)

    def fwd_bwd():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "amp")):
            y = lin(x)
        y.backward(torch.ones_like(y))

    fwd_bwd()
    lin.zero_grad(set_to_none=True)
    x.grad = None
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(mode == "amp")):
        y = lin(x)
    g = torch.ones_like(y)
    trace = record(lambda: y.backward(g), stacks)
    return {
        "case": f"linear n={n} {fin}->{fout} bias={bias} {mode}",
        "n": n, "fin": fin, "fout": fout, "bias": bias, "mode": mode,
        "events": events(trace, stacks == "all"),
    }


def vit_case(batch):
    import torchvision
    model = torchvision.models.vit_b_16(weights=None).to(DEV)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(batch, 3, 224, 224, device=DEV)
    y = torch.randint(0, 1000, (batch,), device=DEV)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    trace = record(step, "python")
    return {"case": f"vit_b_16 train amp b{batch}", "events": events(trace, False, min_size=64 << 20)}


def main():
    cases = []
    for n in (4096, 12608, 32768):
        for fin, fout in ((768, 3072), (3072, 768), (768, 2304), (4096, 4096)):
            for bias in (True, False):
                for mode in ("amp", "bf16", "fp32"):
                    stacks = "all" if (n == 12608 and bias and fin == 768 and fout == 3072) else "python"
                    try:
                        cases.append(linear_case(n, fin, fout, bias, mode, stacks))
                    except Exception as e:  # keep going
                        cases.append({"case": f"linear n={n} {fin}->{fout} bias={bias} {mode}", "error": repr(e)})
                    torch.cuda.empty_cache()
        print("done n", n, flush=True)
    for batch in (32, 64):
        try:
            cases.append(vit_case(batch))
        except Exception as e:
            cases.append({"case": f"vit b{batch}", "error": repr(e)})
        torch.cuda.empty_cache()
        print("done vit", batch, flush=True)
    with open(f"{OUT}/linear-backward.jsonl", "w") as f:
        for c in cases:
            f.write(json.dumps(c) + "\n")
    # A readable summary: per case, transients (allocated and freed within the backward) of >= 1 MiB.
    with open(f"{OUT}/summary.txt", "w") as f:
        for c in cases:
            if "error" in c:
                f.write(f"{c['case']}: {c['error']}\n")
                continue
            live = {}
            trans = []
            kept = []
            for e in c["events"]:
                if e["a"] == "A":
                    live[e["addr"]] = e
                elif e["a"] == "F" and e["addr"] in live:
                    a = live.pop(e["addr"])
                    if a["size"] >= 1 << 20:
                        trans.append(a)
            kept = [a for a in live.values() if a["size"] >= 1 << 20]
            f.write(f"{c['case']}\n  transients: {[t['size'] for t in trans]}\n  kept: {[k['size'] for k in kept]}\n")
            for t in trans:
                if t.get("frames"):
                    f.write(f"    {t['size']}: {' | '.join(t['frames'][:8])}\n")
    print(open(f"{OUT}/summary.txt").read())


main()
