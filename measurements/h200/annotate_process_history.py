"""Records in each measured case whether its process had run a backward pass.

headroom_measure.py --batch runs the cases that share a model build in one
process, in file order (group_cases). An inference case measured after a
training case of its group runs with autograd's second cuBLAS handle and
workspace resident; the core's `runtime.process_ran_backward` says which.
This writes that flag into the `runtime` of every inference case of the
measured files, from the case files they were run from.

usage: python3 measurements/h200/annotate_process_history.py
"""
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(HERE.parent.parent / "calibration-collector" / "python"))
import headroom_measure as h  # noqa: E402

RUNS = {  # measured file: the case file it was run from
    "validation.jsonl": "validation-cases.jsonl",
    "mixtral.jsonl": "mixtral-cases.jsonl",
}

for measured, cases in RUNS.items():
    history = {}
    for group in h.group_cases(h.load_cases(HERE / cases)):
        trained = False
        for case in group:
            history[case["case"]] = trained
            trained = trained or case["workload"]["mode"] == "training"
    path = HERE / measured
    lines = []
    for line in path.read_text().splitlines():
        case = json.loads(line)
        if case["workload"]["mode"] == "inference" and case["case"] in history:
            case["runtime"]["process_ran_backward"] = history[case["case"]]
        lines.append(json.dumps(case))
    path.chmod(0o644)
    path.write_text("\n".join(lines) + "\n")
    print(f"{measured}: {len(lines)} cases, inference ones annotated")
