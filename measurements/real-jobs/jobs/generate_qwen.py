"""Greedy generation with a Qwen2.5-0.5B-shaped model (random weights), bf16.

    python generate_qwen.py --batch 8 --prompt-len 2048 --new-tokens 256
    python generate_qwen.py --arch qwen3_4b ...     # Qwen3-4B-shaped
    python generate_qwen.py --output-scores --output-logits ...  # every step's scores and logits returned
"""
import argparse
import json

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=2048)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--batches", type=int, default=1, help="prompts batches generated one after another")
    p.add_argument("--arch", choices=["qwen05b", "qwen3_4b"], default="qwen05b")
    p.add_argument("--output-scores", action="store_true", help="return_dict_in_generate, output_scores")
    p.add_argument("--output-logits", action="store_true", help="return_dict_in_generate, output_logits")
    p.add_argument("--eos-token-id", type=int, default=None,
                   help="the config's eos_token_id (none by default: generate then adds no minimum-length processor)")
    args = p.parse_args()

    if args.arch == "qwen3_4b":  # docs/spec.md's qwen3-4b preset
        config = Qwen3Config(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                             num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
        build = Qwen3ForCausalLM
    else:
        config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
        build = Qwen2ForCausalLM
    config.eos_token_id = args.eos_token_id
    model = build(config).to(device="cuda", dtype=torch.bfloat16).eval()

    for _ in range(args.batches):
        input_ids = torch.randint(0, config.vocab_size, (args.batch, args.prompt_len), device="cuda")
        attention_mask = torch.ones_like(input_ids)
        extra = {}
        if args.output_scores or args.output_logits:
            extra = dict(return_dict_in_generate=True, output_scores=args.output_scores,
                         output_logits=args.output_logits)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False, pad_token_id=0, **extra)
        sequences = out.sequences if extra else out
        print("generated", tuple(sequences.shape), flush=True)

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
