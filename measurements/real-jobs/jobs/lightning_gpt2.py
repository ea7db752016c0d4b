"""Train GPT-2 (124M, random weights) for a few steps with Lightning, bf16 mixed precision
(or another Lightning `precision`), optionally accumulating gradients.

    python lightning_gpt2.py --batch 8 --seq-len 1024
    python lightning_gpt2.py --batch 8 --seq-len 1024 --precision 16-mixed --accumulate 2
"""
import argparse
import json

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel


class LitGPT2(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.model = GPT2LMHeadModel(GPT2Config())

    def training_step(self, batch, batch_idx):
        (ids,) = batch
        loss = self.model(input_ids=ids, labels=ids).loss
        self.log("loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--precision", default="bf16-mixed", help="Lightning's precision: bf16-mixed, 16-mixed, 32-true")
    p.add_argument("--accumulate", type=int, default=1, help="accumulate_grad_batches")
    args = p.parse_args()

    ids = torch.randint(0, 50257, (args.batch * args.steps * args.accumulate, args.seq_len))
    loader = DataLoader(TensorDataset(ids), batch_size=args.batch)
    module = LitGPT2()
    trainer = L.Trainer(accelerator="gpu", devices=1, precision=args.precision, max_steps=args.steps,
                        accumulate_grad_batches=args.accumulate,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, loader)

    params = sum(p.numel() for p in module.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
