#!/usr/bin/env python3
"""Writes h200-public-history.jsonl: the public cases as received, each
case whose process had built, run and dropped earlier builds of the file
given `runtime.process_builds_before` (how many; docs/spec.md), so that
`headroom check` replays them after those builds' jobs.

The set was measured in three processes: ESMFold alone; then one process
running a `runtime_overheads` probe, Llama-3.1-8B inference, Llama-3.2-1B
training, BERT-base inference (and BERT training, not in the file), ESM-2
650M inference (fp32, then fp16 after `model.half()`, not in the file),
ResNet-50 inference (and training, not in the file), ViT-B/16 training;
each model deleted and the cache emptied before the next was built. So
BERT ran after the file's two Llama builds and ESM-2 after those and
BERT: what they inherit is the cuBLAS workspaces and the address ranges
those jobs left.

ResNet-50 is left as received: the jobs that ran between it and the file's
earlier builds (BERT training, ESM-2 in fp16, the probe's convolution) are
not in the file, and a replay after the file's builds alone reads +16.2%
for batch 256 (5.38 GB against 4.63 measured; Llama-3.2-1B training alone
before it gives the same 5.38 GB), where the case as received reads -0.2%.

    python3 measurements/public/add_process_history.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# Model id: builds of the file its process had run before it.
BUILDS_BEFORE = {"bert-base-uncased": 2, "esm2-t33-650m": 3}


def main():
    with open(os.path.join(HERE, "h200-public.jsonl")) as f, \
            open(os.path.join(HERE, "h200-public-history.jsonl"), "w") as out:
        for line in f:
            case = json.loads(line)
            builds = BUILDS_BEFORE.get(case.get("model"))
            if builds:
                case["runtime"]["process_builds_before"] = builds
            out.write(json.dumps(case) + "\n")


if __name__ == "__main__":
    main()
