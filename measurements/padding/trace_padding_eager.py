"""Which tensors a padded batch adds under eager attention: allocation events with Python frames.

Llama-3.2-1B (random weights, eager attention, 2 layers), amp bf16
training b4 L1024 (one forward and backward), once with a left-padded
batch (the first sequence's first 256 tokens masked out) and once
without a mask. Writes every allocation and free of at least 16 MiB, in
order, with the innermost Python frames outside torch/nn/modules, to
OUT/eager-train-MASK.events.txt.

  python3 trace_padding_eager.py OUT
"""
import os
import sys

from trace_padding import frames


def run(mask_kind, out_dir):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=2,
                      num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=True,
                      rope_theta=500000.0, pad_token_id=0)
    cfg._attn_implementation = "eager"
    b, s = 4, 1024
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    ids = torch.randint(1, 128000, (b, s), device="cuda")
    mask = None
    if mask_kind == "padded":
        mask = torch.ones((b, s), dtype=torch.long, device="cuda")
        mask[0, :256] = 0
        ids[0, :256] = 0
    torch.cuda.synchronize()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False).loss
    loss.backward()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(os.path.join(out_dir, f"eager-train-{mask_kind}.events.txt"), "w") as f:
        f.write(f"# eager amp bf16 training b{b} L{s}, 2 layers, mask {mask_kind}; torch {torch.__version__}\n")
        for trace in snap["device_traces"]:
            for e in trace:
                if e["action"] in ("alloc", "free_requested") and e["size"] >= 16 << 20:
                    f.write(f"{'A' if e['action'] == 'alloc' else 'F'} {e['size']} {e['addr']} {frames(e)}\n")
    del model, loss
    torch.cuda.empty_cache()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    run("padded", sys.argv[1])
    run("none", sys.argv[1])
