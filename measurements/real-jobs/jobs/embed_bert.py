"""Sentence embeddings: BERT-base (random weights) in fp16, mean pooling over the attention mask.

    python embed_bert.py --batch 64 --seq-len 512
"""
import argparse
import json

import torch
from transformers import BertConfig, BertModel


def mean_pool(last_hidden_state, attention_mask):
    mask = attention_mask.unsqueeze(-1).to(last_hidden_state.dtype)
    return (last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batches", type=int, default=1, help="batches embedded one after another")
    args = p.parse_args()

    config = BertConfig()
    model = BertModel(config).to(device="cuda", dtype=torch.float16).eval()

    embeddings = []
    for _ in range(args.batches):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq_len), device="cuda")
        attention_mask = torch.ones_like(input_ids)
        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=attention_mask)
            emb = torch.nn.functional.normalize(mean_pool(out.last_hidden_state, attention_mask), dim=-1)
        embeddings.append(emb.cpu())
    print("embeddings", len(embeddings), tuple(emb.shape), flush=True)

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
