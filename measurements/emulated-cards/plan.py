#!/usr/bin/env python3
"""Plans the emulated-card boundary runs: for each job and card, torch's
allocator limit (the card's usable memory less the job's bytes outside the
allocator, as `estimate` predicts them), the longest length (or largest
batch) the replay says runs under that limit (every value scanned, not a
bisection), and the points 3% under and over it. Prints one `run` command
per job and card, and the plan as JSON lines to plan.jsonl.

    python3 measurements/emulated-cards/plan.py target/release/headroom
"""
import json
import math
import subprocess
import sys

MIB = 1 << 20
# The catalog's usable bytes (core/src/gpus.rs: x.xx GiB as PyTorch prints it).
CARDS = {
    "rtx-4090": (2364 * 1024 + 50) // 100 * MIB,
    "rtx-5090": (3136 * 1024 + 50) // 100 * MIB,
    "rtx-6000-ada": (4443 * 1024 + 50) // 100 * MIB,
}
JOBS = {
    "esmfold-unchunked": ("esmfold-v1", {"mode": "inference", "dtype": "fp32", "esmfold": {"stem_dtype": "fp16", "chunk_size": None, "num_recycles": 4}}, "length"),
    "esmfold-chunk64": ("esmfold-v1", {"mode": "inference", "dtype": "fp32", "esmfold": {"stem_dtype": "fp16", "chunk_size": 64, "num_recycles": 4}}, "length"),
    "llama8b-lora-ckpt": ("llama-3.1-8b", {"mode": "training", "dtype": "bf16", "attention": "sdpa",
                                           "training": {"optimizer": "adamw", "precision": "bf16", "steps": 2,
                                                        "grad_checkpointing": True,
                                                        "lora": {"rank": 16, "alpha": 32, "target_modules": ["q_proj", "v_proj"]}}}, "length"),
    "llama8b-full-ckpt": ("llama-3.1-8b", {"mode": "training", "dtype": "bf16", "attention": "sdpa",
                                           "training": {"optimizer": "adamw", "precision": "bf16", "steps": 2,
                                                        "grad_checkpointing": True}}, "length"),
    "resnet50-train": ("resnet-50", {"mode": "training", "dtype": "fp32", "image_size": 224,
                                     "training": {"optimizer": "sgd", "momentum": 0.9, "precision": "fp32", "steps": 2}}, "batch"),
}


def cli(bin_, *args):
    out = subprocess.run([bin_, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)}: {out.stderr}")
    return out.stdout


def outside(bin_, model, workload):
    spec = json.dumps({"model": model, "workload": dict(workload, batch=1, seq_len=256)})
    p = subprocess.run([bin_, "estimate", "-"], input=spec, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr)
    return json.loads(p.stdout)["outside_allocator"]


def fits_each(bin_, model, workload, axis, values, limit):
    """Whether each value runs under `limit` (one dry run, every value)."""
    flag = "--seq-lens" if axis == "length" else "--batches"
    fixed = ["--batches", "1"] if axis == "length" else ["--seq-lens", "224"]
    text = cli(bin_, "run", "--model", model, "--workload", json.dumps(workload), flag,
               ",".join(map(str, values)), *fixed, "--capacity", str(limit), "--dry-run")
    return [("runs out of memory" not in line) for line in text.splitlines() if line.startswith("# ")]


def main():
    bin_ = sys.argv[1]
    with open("measurements/emulated-cards/plan.jsonl", "w") as out:
        for job, (model, workload, axis) in JOBS.items():
            out_bytes = outside(bin_, model, workload)
            for card, usable in CARDS.items():
                limit = usable - out_bytes
                hi = {"esmfold-v1": 4096, "llama-3.1-8b": 16384}.get(model, 2048)
                values = list(range(1, hi + 1)) if axis == "batch" else list(range(16, hi + 1, 1))
                fits = fits_each(bin_, model, workload, axis, values, limit)
                first_fail = next((v for v, f in zip(values, fits) if not f), None)
                longest = (first_fail - 1) if first_fail else hi
                under, over = math.floor(longest * 0.97), math.ceil(longest * 1.03)
                plan = dict(job=job, card=card, model=model, axis=axis, usable_bytes=usable,
                            outside_allocator=out_bytes, allocator_limit_bytes=limit,
                            predicted_longest=longest, under=under, over=over)
                out.write(json.dumps(plan) + "\n")
                print(json.dumps(plan), flush=True)


if __name__ == "__main__":
    main()
