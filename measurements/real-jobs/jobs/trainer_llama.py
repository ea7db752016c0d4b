"""Fine-tune a Llama-3.2-1B-shaped model with the Hugging Face Trainer.

The Trainer keeps its defaults (optimizer "adamw_torch_fused", no weight
decay, gradient clipping at 1.0, the model moved to the GPU by the Trainer)
apart from bf16=True, the batch, a few steps and no checkpoint written.
Random weights from the config and random token ids: nothing is downloaded.

    python trainer_llama.py --batch 4 --seq-len 1024
    python trainer_llama.py --batch 8 --seq-len 2048 --gradient-checkpointing
    python trainer_llama.py --batch 4 --seq-len 1024 --lora      # PEFT LoRA r=8 on q_proj, v_proj
    python trainer_llama.py --batch 4 --seq-len 1024 --fp16      # fp16=True instead of bf16=True
    python trainer_llama.py --batch 2 --seq-len 1024 --grad-accum 4
    python trainer_llama.py --arch qwen05b --batch 8 --seq-len 1024   # Qwen2.5-0.5B-shaped
    python trainer_llama.py --arch gpt2 --optim adamw_torch ...        # GPT-2, foreach AdamW
    python trainer_llama.py --arch qwen3_1p7b --lora ...                # Qwen3-1.7B-shaped
"""
import argparse
import json
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, Trainer, TrainingArguments)


class RandomTokens(Dataset):
    def __init__(self, n, seq_len, vocab_size):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab_size, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters on a bf16 base")
    p.add_argument("--fp16", action="store_true", help="fp16=True (autocast float16, GradScaler)")
    p.add_argument("--grad-accum", type=int, default=1, help="gradient_accumulation_steps")
    p.add_argument("--arch", choices=["llama1b", "qwen05b", "gpt2", "qwen3_0p6b", "qwen3_1p7b"], default="llama1b")
    p.add_argument("--optim", default="adamw_torch_fused", help="TrainingArguments.optim")
    args = p.parse_args()

    if args.arch == "qwen05b":  # docs/spec.md's qwen2.5-0.5b preset
        config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
        build = Qwen2ForCausalLM
    elif args.arch in ("qwen3_0p6b", "qwen3_1p7b"):  # docs/spec.md's qwen3 presets
        hidden, inter = (1024, 3072) if args.arch == "qwen3_0p6b" else (2048, 6144)
        config = Qwen3Config(vocab_size=151936, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=28,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
        build = Qwen3ForCausalLM
    elif args.arch == "gpt2":
        config, build = GPT2Config(), GPT2LMHeadModel
    else:
        config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                             num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                             tie_word_embeddings=True)
        build = LlamaForCausalLM
    if args.lora:
        from peft import LoraConfig, get_peft_model

        model = build(config).to(torch.bfloat16)
        model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
        model.print_trainable_parameters()
    else:
        model = build(config)

    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=args.batch,
            max_steps=args.steps,
            bf16=not args.fp16,
            fp16=args.fp16,
            gradient_accumulation_steps=args.grad_accum,
            optim=args.optim,
            gradient_checkpointing=args.gradient_checkpointing,
            save_strategy="no",  # 5.17 saves a checkpoint after the last step by default
        )
        print("optimizer:", training_args.optim, flush=True)
        trainer = Trainer(model=model, args=training_args,
                          train_dataset=RandomTokens(args.batch * args.steps * args.grad_accum, args.seq_len, config.vocab_size))
        trainer.train()

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
