"""Records in each measured case what its process held before it ran.

headroom_measure.py --batch runs the cases that share a model build in one
process, in file order (group_cases). A case measured after a training
case of its group runs with autograd's second cuBLAS handle and workspace
resident (a first case creates its workspaces lazily); the core's
`runtime.process_ran_backward` says which.
The harness also creates one optimizer per build and keeps it: a training
case after another one of its group starts with the optimizer state
resident (`workload.training.optimizer_state_resident`). This writes both
into the measured files, from the case files they were run from.

usage: python3 measurements/h200/annotate_process_history.py
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "calibration-collector" / "python"))
import headroom_measure as h  # noqa: E402

GENERALIZATION = HERE.parent / "h200-generalization"
RUNS = {  # measured file: the case file it was run from
    HERE / "validation.jsonl": HERE / "validation-cases.jsonl",
    HERE / "mixtral.jsonl": HERE / "mixtral-cases.jsonl",
    GENERALIZATION / "harness-use-cache-measured.jsonl": GENERALIZATION / "harness-use-cache-cases.jsonl",
    HERE.parent / "small-pool" / "measured.jsonl": HERE.parent / "small-pool" / "cases.jsonl",
    HERE.parent / "small-pool" / "measured-inference.jsonl": HERE.parent / "small-pool" / "cases-inference.jsonl",
    HERE.parent / "padding" / "measured-padded.jsonl": HERE.parent / "padding" / "cases-padded.jsonl",
    HERE.parent / "padding" / "measured-padded-eager.jsonl": HERE.parent / "padding" / "cases-padded-eager.jsonl",
    HERE.parent / "generation-search" / "measured-beams.jsonl": HERE.parent / "generation-search" / "cases-beams.jsonl",
}
# Every generalization batch: its case file and the measured file beside it.
for cases in sorted(GENERALIZATION.glob("generalization-cases*.jsonl")):
    batch = cases.name.removeprefix("generalization-cases")
    RUNS[GENERALIZATION / f"measured{batch}"] = cases

# Measured before the harness passed `use_cache=training.use_cache`: their
# decoder training ran with transformers' default cache.
RAN_WITH_CACHE = [HERE / "validation.jsonl"] + [
    GENERALIZATION / f"measured{n}.jsonl" for n in ("", "-2", "-3", "-4", "-5")
]

# Several-GPU cases: each ran in a fresh torchrun job
# (`measurements/h200-parallel/run.sh`), so none ran backward before.
TORCHRUN = [HERE.parent / "h200-parallel" / f"measured-w1{s}.jsonl" for s in ("", "-2", "-oom")]


def is_decoder(model):
    return model.split("-")[0] in ("gpt2", "llama", "mistral", "qwen2.5", "mixtral", "phi", "gemma", "qwen1.5")


for measured, cases in RUNS.items():
    history = {}
    for group in h.group_cases(h.load_cases(cases)):
        trained = False
        for case in group:
            history[case["case"]] = trained
            trained = trained or case["workload"]["mode"] == "training"
        optimizers = [c["workload"]["training"].get("optimizer") for c in group if c["workload"]["mode"] == "training"]
        assert len(set(optimizers)) <= 1, f"one optimizer per build: {optimizers}"
    path = measured
    lines = []
    for line in path.read_text().splitlines():
        case = json.loads(line)
        if case["case"] in history:
            case["runtime"]["process_ran_backward"] = history[case["case"]]
            if case["workload"]["mode"] == "training":
                case["workload"]["training"]["optimizer_state_resident"] = history[case["case"]]
                if is_decoder(case["model"]) and measured in RAN_WITH_CACHE:
                    # This harness calls `model(input_ids=ids, labels=ids)`
                    # without `use_cache=False`: transformers fills a
                    # DynamicCache from the config default (off under
                    # gradient checkpointing, which the core knows).
                    case["workload"]["training"].setdefault("use_cache", True)
        lines.append(json.dumps(case))
    path.chmod(0o644)
    path.write_text("\n".join(lines) + "\n")
    print(f"{measured.name}: {len(lines)} cases, every case annotated")

for path in TORCHRUN:
    lines = []
    for line in path.read_text().splitlines():
        case = json.loads(line)
        case["runtime"]["process_ran_backward"] = False
        lines.append(json.dumps(case))
    path.chmod(0o644)
    path.write_text("\n".join(lines) + "\n")
    print(f"{path.name}: {len(lines)} cases, each a fresh process")
