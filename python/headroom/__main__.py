"""``python -m headroom``: a thin command line over the package.

    python -m headroom estimate SPEC [--gpu GPU]   # the estimate's JSON, as `headroom estimate` prints it
    python -m headroom gpus SPEC [--margin PCT]    # which cards fit, the jobs per card, the longest length

Exit codes as the ``headroom`` command's: 0 the answer, 1 bad input, 64 a
wrong command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from . import SpecError, estimate, gpus


def _gpus_table(spec: str, margin: int) -> str:
    table = gpus(spec, margin_percent=margin)
    r = table.likely_range
    lines = [
        f"driver peak {table.driver_peak:,} bytes, likely {r.low:,} to {r.high:,}; "
        f"request {table.reservation_bytes:,} bytes ({margin}% margin)",
        "",
        f"{'gpu':30} {'usable GB':>10} {'fits':>5} {'jobs':>5} {'max ' + table.length_axis:>13} {'max batch':>10}",
    ]
    for row in table.rows:
        lines.append(
            f"{row.gpu.name:30} {row.gpu.usable_bytes / 1e9:>10.2f} {'yes' if row.fits else 'no':>5} "
            f"{row.jobs:>5} {row.max_length if row.max_length is not None else '-':>13} "
            f"{row.max_batch if row.max_batch is not None else '-':>10}"
        )
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m headroom", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    est = commands.add_parser("estimate", help="the estimate's JSON (as `headroom estimate`)")
    est.add_argument("spec", help="spec JSON file")
    est.add_argument("--gpu", help="a catalog card, e.g. rtx-4090")
    fit = commands.add_parser("gpus", help="which cards of the catalog run the job")
    fit.add_argument("spec", help="spec JSON file")
    fit.add_argument("--margin", type=int, default=0, help="percent on top of the likely range's top")
    fit.add_argument("--json", action="store_true", help="print the rows as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code == 0 else 64
    try:
        if args.command == "estimate":
            sys.stdout.write(estimate(args.spec, gpu=args.gpu).to_json())
        elif args.json:
            table = gpus(args.spec, margin_percent=args.margin)
            rows = [{**row.__dict__, "gpu": row.gpu.id} for row in table.rows]
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        else:
            sys.stdout.write(_gpus_table(args.spec, args.margin))
    except (SpecError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
