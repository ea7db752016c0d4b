"""Writes specs/NAME.json for every job of a jobs file: the job as its
author wrote it (the framework's own arguments, as `to_dict()` writes them),
for `headroom check` and `headroom estimate`.

    python3 measurements/qlora/make_specs.py measurements/qlora/jobs-1.txt
"""
import argparse
import json
import os
import shlex
import sys

MODELS = {"llama1b": "llama-3.2-1b", "llama8b": "llama-3.1-8b", "qwen1p5b": "qwen2.5-1.5b", "qwen7b": "qwen2.5-7b"}
BNB_OPTIMIZERS = {"paged_adamw_8bit", "paged_adamw_32bit", "adamw_8bit"}


def quantization_config(quant, double_quant):
    if quant == "int8":
        return {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False,
                "llm_int8_threshold": 6.0, "llm_int8_has_fp16_weight": False}
    return {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
            "bnb_4bit_quant_type": quant, "bnb_4bit_use_double_quant": double_quant,
            "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_storage": "uint8"}


def train_spec(argv, length, batch):
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="llama8b")
    p.add_argument("--quant", default="nf4")
    p.add_argument("--no-double-quant", action="store_true")
    p.add_argument("--optim", default="paged_adamw_8bit")
    p.add_argument("--loop", default="trainer")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--targets", default="all-linear")
    p.add_argument("--dropout", type=float, default=0.05)
    p.add_argument("--no-gc", action="store_true")
    p.add_argument("--batch")
    p.add_argument("--seq-len")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args(argv)
    targets = a.targets if a.targets == "all-linear" else a.targets.split(",")
    workload = {
        "seq_len": length,
        "lora_config": {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": a.rank, "lora_alpha": 2 * a.rank,
                        "lora_dropout": a.dropout, "target_modules": targets},
        "quantization_config": quantization_config(a.quant, not a.no_double_quant),
    }
    if a.loop == "trainer":
        workload["framework"] = "hf_trainer"
        workload["training_args"] = {"per_device_train_batch_size": batch, "max_steps": a.steps, "bf16": True,
                                     "optim": a.optim, "gradient_checkpointing": not a.no_gc,
                                     "save_strategy": "no", "report_to": "none"}
    else:
        # A plain loop without autocast; prepare_model_for_kbit_training
        # turns checkpointing on (and the cache off with it).
        workload["framework"] = "torch"
        workload["mode"] = "training"
        workload["batch"] = batch
        optimizer, implementation = ("adamw", "fused") if a.optim == "adamw_torch_fused" else (a.optim, None)
        workload["training"] = {"optimizer": optimizer, "steps": a.steps, "grad_checkpointing": not a.no_gc}
        if implementation:
            workload["training"]["implementation"] = implementation
    return MODELS[a.arch], workload


def generate_spec(argv, length, batch):
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="llama8b")
    p.add_argument("--quant", default="nf4")
    p.add_argument("--no-double-quant", action="store_true")
    p.add_argument("--batch")
    p.add_argument("--prompt-len")
    p.add_argument("--new-tokens", type=int, default=64)
    a = p.parse_args(argv)
    workload = {"framework": "hf_generate", "batch": batch, "seq_len": length,
                "generation_config": {"max_new_tokens": a.new_tokens, "min_new_tokens": a.new_tokens,
                                      "do_sample": False},
                "quantization_config": quantization_config(a.quant, not a.no_double_quant)}
    return MODELS[a.arch], workload


def main():
    jobs_file = sys.argv[1]
    out_dir = os.path.join(os.path.dirname(jobs_file), "specs")
    os.makedirs(out_dir, exist_ok=True)
    for line in open(jobs_file):
        if line.startswith("#") or not line.strip():
            continue
        name, length, batch, cmd = line.rstrip("\n").split("|", 3)
        argv = shlex.split(cmd)[1:]
        script, argv = argv[0], argv[1:]
        build = train_spec if script == "qlora_train.py" else generate_spec
        model, workload = build(argv, int(length), int(batch))
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump({"model": model, "workload": workload}, f, indent=1)
            f.write("\n")
        print(name)


if __name__ == "__main__":
    main()
