"""Which tensors a padded batch adds: allocation events with Python frames.

Llama-3.2-1B (random weights, SDPA, 4 layers), one left-padded batch
(the first sequence's first 256 tokens masked out), run once as amp bf16
training (b8 L2048, one step) and once as a bf16 forward (b8 L4096).
Writes every allocation and free of at least 16 MiB, in order, with the
innermost Python frames outside torch/nn/modules, to OUT/JOB.events.txt.

  python3 trace_padding.py OUT
"""
import os
import sys


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


def run(job, out_dir):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=4,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                      rope_theta=500000.0, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    b, s = (8, 2048) if job == "train" else (8, 4096)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    if job != "train":
        model = model.to(torch.bfloat16)
    ids = torch.randint(1, 128000, (b, s), device="cuda")
    mask = torch.ones((b, s), dtype=torch.long, device="cuda")
    mask[0, :256] = 0
    ids[0, :256] = 0
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    if job == "train":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False).loss
        loss.backward()
    else:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(os.path.join(out_dir, f"{job}.events.txt"), "w") as f:
        f.write(f"# {job} b{b} L{s}, 4 layers, left-padded; torch {torch.__version__}\n")
        for trace in snap["device_traces"]:
            for e in trace:
                if e["action"] in ("alloc", "free_requested") and e["size"] >= 16 << 20:
                    f.write(f"{'A' if e['action'] == 'alloc' else 'F'} {e['size']} {e['addr']} {frames(e)}\n")


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    run("train", sys.argv[1])
    run("forward", sys.argv[1])
