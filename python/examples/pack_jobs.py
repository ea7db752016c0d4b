"""How many ESMFold processes fit on one card at once, for a queue of proteins.

    python pack_jobs.py --gpu rtx-4090 --lengths 120 300 300 800 1024
    python pack_jobs.py --gpu h100 --lengths-file lengths.txt --chunk-size 64

Each process folds one sequence at a time (batch 1). Separate processes
do not fragment each other, so a card runs as many as its usable memory
holds of each one's reservation (the likely range's top, in whole MiB):
``headroom.estimate(spec).jobs_per_card(gpu)``. A process that folds the
whole queue must be sized for its longest sequence, so the queue's
processes at once are the longest length's jobs per card; the plan also
lists each length's own figure.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Iterable, Optional

import headroom


def esmfold_spec(seq_len: int, chunk_size: Optional[int] = 64, num_recycles: int = 3) -> dict:
    """The spec of one ESMFold process folding a sequence of ``seq_len`` residues."""
    return {
        "model": "esmfold-v1",
        "workload": {
            "mode": "inference",
            "batch": 1,
            "seq_len": seq_len,
            "esmfold": {"stem_dtype": "fp16", "chunk_size": chunk_size, "num_recycles": num_recycles},
        },
    }


@dataclass(frozen=True)
class Plan:
    """How a queue of sequences runs on one card."""

    #: The card.
    gpu: headroom.Card
    #: Processes of each distinct length that fit at once (0: that length does not fit).
    jobs_per_length: dict[int, int]
    #: Processes that run the whole queue side by side, each sized for the
    #: longest sequence (0: the longest does not fit the card).
    processes: int
    #: Sequences in the queue.
    sequences: int

    @property
    def rounds(self) -> Optional[int]:
        """Rounds of ``processes`` folds the queue takes (``None`` when none fits)."""
        return math.ceil(self.sequences / self.processes) if self.processes else None


def plan(lengths: Iterable[int], gpu: str, chunk_size: Optional[int] = 64) -> Plan:
    """The plan for folding ``lengths`` on ``gpu`` (a catalog name)."""
    queue = list(lengths)
    if not queue:
        raise ValueError("lengths: the queue is empty")
    card = headroom.find_gpu(gpu)
    jobs = {
        n: headroom.estimate(esmfold_spec(n, chunk_size)).jobs_per_card(card)
        for n in sorted(set(queue))
    }
    return Plan(gpu=card, jobs_per_length=jobs, processes=jobs[max(queue)], sequences=len(queue))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True, help="a catalog card, e.g. rtx-4090, h100, a100-80gb")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--lengths", type=int, nargs="+", help="the queue's sequence lengths")
    source.add_argument("--lengths-file", help="a file with one sequence length per line")
    parser.add_argument("--chunk-size", type=int, default=64, help="ESMFold's trunk chunk size (0: unchunked)")
    args = parser.parse_args()
    if args.lengths_file:
        with open(args.lengths_file) as f:
            lengths = [int(line) for line in f if line.strip()]
    else:
        lengths = args.lengths
    result = plan(lengths, args.gpu, args.chunk_size or None)
    print(f"{result.gpu.name}: {result.sequences} sequences")
    for n, jobs in result.jobs_per_length.items():
        print(f"  length {n:>5}: {jobs} process(es) at once" if jobs else f"  length {n:>5}: does not fit")
    if result.processes:
        print(f"the queue: {result.processes} process(es) at once, {result.rounds} round(s)")
    else:
        print("the queue: its longest sequence does not fit this card (a smaller chunk size may)")


if __name__ == "__main__":
    main()
