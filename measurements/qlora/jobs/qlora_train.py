"""QLoRA fine-tuning as the recipes write it: a bf16 checkpoint loaded with
`from_pretrained(quantization_config=BitsAndBytesConfig(...))`,
`prepare_model_for_kbit_training`, peft LoRA, then the Hugging Face Trainer
(`bf16=True`) or a plain loop. Random token ids; nothing is downloaded.

    python3 qlora_train.py --arch llama8b --batch 1 --seq-len 2048
    python3 qlora_train.py --arch llama1b --quant int8 --optim adamw_torch_fused --loop plain ...
    python3 qlora_train.py --arch qwen7b --quant fp4 --no-double-quant --targets q_proj,v_proj ...

Prints `HEADROOM_RESULT {...}` (the allocator's peaks) for the collector, and
appends one JSON line of detail (the load's figures, the paged optimizer
state, the device's used memory beside the reservation) to
$QLORA_DETAIL_FILE when it is set.
"""
import argparse
import json
import os
import sys
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, Trainer, TrainingArguments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import checkpoint


class RandomTokens(Dataset):
    def __init__(self, n, seq_len, vocab_size):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab_size, (n, seq_len), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def quantization(args):
    if args.quant == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=args.quant,
                              bnb_4bit_use_double_quant=not args.no_double_quant,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def paged_state_bytes(optimizer):
    total = 0
    for state in optimizer.state.values():
        for t in state.values():
            if torch.is_tensor(t) and getattr(t, "is_paged", False):
                total += t.numel() * t.element_size()
    return total


def plain_optimizer(name, params):
    import bitsandbytes as bnb

    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "paged_adamw_8bit":
        return bnb.optim.PagedAdamW8bit(params, lr=1e-4)
    if name == "paged_adamw_32bit":
        return bnb.optim.PagedAdamW32bit(params, lr=1e-4)
    if name == "adamw_8bit":
        return bnb.optim.AdamW8bit(params, lr=1e-4)
    raise SystemExit(f"unknown optimizer {name!r}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="llama8b")
    p.add_argument("--quant", choices=["nf4", "fp4", "int8"], default="nf4")
    p.add_argument("--no-double-quant", action="store_true")
    p.add_argument("--optim", default="paged_adamw_8bit", help="TrainingArguments.optim")
    p.add_argument("--loop", choices=["trainer", "plain"], default="trainer")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--targets", default="all-linear")
    p.add_argument("--dropout", type=float, default=0.05)
    p.add_argument("--no-gc", action="store_true", help="no gradient checkpointing")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    gc = not args.no_gc

    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    model = AutoModelForCausalLM.from_pretrained(checkpoint(args.arch), quantization_config=quantization(args),
                                                 dtype=torch.bfloat16, device_map={"": 0})
    torch.cuda.synchronize()
    detail = {"arch": args.arch, "quant": args.quant, "optim": args.optim, "loop": args.loop,
              "batch": args.batch, "seq_len": args.seq_len,
              "load": {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                       "alloc_peak": torch.cuda.max_memory_allocated(), "device_used": device_used()}}
    model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gc)
    targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=args.dropout,
                                             target_modules=targets, task_type="CAUSAL_LM"))
    detail["prepared"] = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    vocab = model.config.vocab_size
    data = RandomTokens(args.batch * args.steps, args.seq_len, vocab)

    if args.loop == "trainer":
        with tempfile.TemporaryDirectory() as out:
            training_args = TrainingArguments(output_dir=out, per_device_train_batch_size=args.batch,
                                              max_steps=args.steps, bf16=True, optim=args.optim,
                                              gradient_checkpointing=gc, save_strategy="no", report_to="none")
            trainer = Trainer(model=model, args=training_args, train_dataset=data)
            trainer.train()
            optimizer = trainer.optimizer
    else:
        model.train()
        optimizer = plain_optimizer(args.optim, [q for q in model.parameters() if q.requires_grad])
        for i in range(args.steps):
            ids = data.ids[i * args.batch:(i + 1) * args.batch].cuda()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    detail["end"] = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
                     "device_used": device_used(), "paged_state": paged_state_bytes(optimizer),
                     "alloc_peak": torch.cuda.max_memory_allocated(),
                     "reserved_peak": torch.cuda.max_memory_reserved()}
    if os.environ.get("QLORA_DETAIL_FILE"):
        with open(os.environ["QLORA_DETAIL_FILE"], "a") as f:
            f.write(json.dumps(detail) + "\n")
    print("QLORA_DETAIL " + json.dumps(detail), flush=True)
    params = sum(q.numel() for q in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
