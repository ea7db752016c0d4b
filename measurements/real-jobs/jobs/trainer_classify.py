"""Fine-tune a model for classification with the Hugging Face Trainer.

The Trainer keeps its defaults (optimizer "adamw_torch_fused", no weight
decay, gradient clipping at 1.0, the model moved to the GPU by the Trainer)
apart from bf16=True, the batch, a few steps and no checkpoint written.
Random weights from the config, random token ids and labels: nothing is
downloaded.

    python trainer_classify.py --arch bert_base --task sequence --batch 32 --seq-len 512
    python trainer_classify.py --arch esm2_650m --task token --num-labels 3 --batch 8 --seq-len 1024
    python trainer_classify.py --arch esm2_650m --task sequence --gradient-checkpointing ...
    python trainer_classify.py --arch llama1b --task sequence --num-labels 1 ...   # a reward model's regression head
"""
import argparse
import json
import tempfile

import torch
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, BertForTokenClassification,
                          EsmConfig, EsmForSequenceClassification, EsmForTokenClassification, LlamaConfig,
                          LlamaForSequenceClassification, Trainer, TrainingArguments)


class RandomExamples(Dataset):
    def __init__(self, n, seq_len, token_range, num_labels, per_token):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(*token_range, (n, seq_len), generator=g)
        shape = (n, seq_len) if per_token else (n,)
        if num_labels == 1:  # one label: a regression target (transformers' MSE loss)
            self.labels = torch.randn(shape, generator=g)
        else:
            self.labels = torch.randint(0, num_labels, shape, generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--arch", choices=["bert_base", "esm2_650m", "llama1b"], default="bert_base")
    p.add_argument("--task", choices=["sequence", "token"], default="sequence")
    p.add_argument("--num-labels", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--gradient-checkpointing", action="store_true")
    args = p.parse_args()

    if args.arch == "esm2_650m":  # docs/spec.md's esm2-t33-650m preset
        config = EsmConfig(vocab_size=33, hidden_size=1280, num_hidden_layers=33, num_attention_heads=20,
                           intermediate_size=5120, position_embedding_type="rotary", token_dropout=True,
                           pad_token_id=1, mask_token_id=32, max_position_embeddings=1026,
                           num_labels=args.num_labels)
        build = EsmForSequenceClassification if args.task == "sequence" else EsmForTokenClassification
        token_range = (4, 24)
    elif args.arch == "llama1b":  # docs/spec.md's llama-3.2-1b preset, with a padding id for batches
        config = LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                             num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                             tie_word_embeddings=True, pad_token_id=0, num_labels=args.num_labels)
        assert args.task == "sequence", "a decoder's token classifier is not modelled"
        build = LlamaForSequenceClassification
        token_range = (3, 128000)
    else:
        config = BertConfig(num_labels=args.num_labels)
        build = BertForSequenceClassification if args.task == "sequence" else BertForTokenClassification
        token_range = (1000, 30000)
    model = build(config)

    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=args.batch,
            max_steps=args.steps,
            bf16=True,
            gradient_checkpointing=args.gradient_checkpointing,
            save_strategy="no",  # 5.17 saves a checkpoint after the last step by default
        )
        print("optimizer:", training_args.optim, flush=True)
        data = RandomExamples(args.batch * args.steps, args.seq_len, token_range, args.num_labels,
                              args.task == "token")
        Trainer(model=model, args=training_args, train_dataset=data).train()

    params = sum(p.numel() for p in model.parameters())
    print("HEADROOM_RESULT " + json.dumps({"alloc_peak": torch.cuda.max_memory_allocated(),
                                           "reserved_peak": torch.cuda.max_memory_reserved(),
                                           "params": params}), flush=True)


if __name__ == "__main__":
    main()
