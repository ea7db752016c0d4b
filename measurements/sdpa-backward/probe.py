"""Which fused attention kernel PyTorch picks for 16-bit SDPA training on
this GPU, and the workspace its backward allocates: for each shape, the
default choice and each backend forced, the allocations (> 64 KiB) made
during backward besides the three input gradients. One line of JSON per
(shape, backend). Run: python3 probe.py > probe.jsonl"""
import json
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "default": None,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
}
SHAPES = [
    # batch, heads, kv_heads, seq, head_dim, causal, layout
    (2, 12, 12, 197, 64, False, "bhsd"),
    (2, 12, 12, 197, 64, False, "bshd"),
    (2, 12, 12, 256, 64, False, "bhsd"),
    (2, 12, 12, 1000, 64, True, "bshd"),
    (2, 12, 12, 1024, 64, True, "bshd"),
    (2, 16, 4, 1000, 128, True, "bshd"),
    (2, 16, 4, 1024, 128, True, "bshd"),
    (2, 32, 32, 1024, 96, True, "bshd"),
]


def tensors(b, h, hk, s, d, layout):
    def make(heads):
        if layout == "bshd":  # HF: projections viewed (b, s, h, d), then transposed
            t = torch.randn(b, s, heads, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        else:
            t = torch.randn(b, heads, s, d, device="cuda", dtype=torch.bfloat16)
        return t.detach().requires_grad_()
    return make(h), make(hk), make(hk)


def run(shape, backend):
    b, h, hk, s, d, causal, layout = shape
    q, k, v = tensors(b, h, hk, s, d, layout)
    ctx = sdpa_kernel([backend]) if backend is not None else torch.enable_grad()
    with ctx:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hk < h)
    grad = torch.randn_like(out)
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=100000)
    out.backward(grad)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    allocs = [e["size"] for t in snap["device_traces"] for e in t if e["action"] == "alloc" and e["size"] > 65536]
    return allocs


for shape in SHAPES:
    for name, backend in BACKENDS.items():
        try:
            allocs = run(shape, backend)
            err = None
        except Exception as e:  # a backend that refuses the shape
            allocs, err = [], str(e).splitlines()[0][:120]
        b, h, hk, s, d, causal, layout = shape
        print(json.dumps({"batch": b, "heads": h, "kv_heads": hk, "seq": s, "head_dim": d,
                          "causal": causal, "layout": layout, "backend": name,
                          "allocs": allocs, "error": err,
                          "out_fp32_bytes": b * h * s * d * 4, "row_sums_bytes": b * h * s * 4}), flush=True)
        torch.cuda.empty_cache()
