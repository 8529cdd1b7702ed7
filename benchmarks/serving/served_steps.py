"""Decode steps as served: a cost table of whole steps from a serving run's per-iteration traces.

For each server run given, the gap from a decode launch to the next launch, where the two
iterations before it were decode too (with overlap scheduling the second decode after a prefill
still holds the prefill's GPU time), is one served step of that run's mode at its batch size.
Steps are pooled per batch-size octave (nearest power of two); each octave with at least
`--min-samples` steps gives one row: the median batch size, the median gap. PLAIN runs give
``plain_step`` rows, SPECULATING runs ``spec_step_<topk>x<steps>x<K>`` rows, at the context
given (the served requests' mean: prompt plus half the output), in the cost-table format
(specfsm.model.tables), so that `specfsm tune --table BASE+THIS` prices both modes as served.

    python benchmarks/serving/served_steps.py --traces traces_logs.tgz's iters/specfsm \\
        --plain 2,5,8,10 --spec 4,7 --ctx 1220 --shape 1x3x4 > served.csv

`--plain` / `--spec` name the run segments of the trace file (0-based, in launch order; runs
are separated by more than `--gap-s` seconds without an iteration). `--nodraft-traces` with
`--nodraft` adds ``nodraft_step`` rows from a server without a draft model (the simulator's
no-spec server, `sim_predict`). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any


def segments(path: Path, gap_s: float) -> list[list[list[Any]]]:
    """The iteration records of `path`, cut where no iteration launched for `gap_s`."""
    with open(path) as fh:
        recs = [json.loads(x) for x in fh if x.strip()]
    out: list[list[list[Any]]] = []
    start = 0
    for i in range(1, len(recs)):
        if recs[i][0] - recs[i - 1][0] > gap_s:
            out.append(recs[start:i])
            start = i
    out.append(recs[start:])
    return out


def served_steps(runs: list[list[list[Any]]]) -> dict[int, list[tuple[int, float]]]:
    """(bs, ms) of every clean decode step of `runs`, by batch-size octave."""
    by: dict[int, list[tuple[int, float]]] = {}
    for recs in runs:
        for i in range(2, len(recs) - 1):
            if recs[i][1] == recs[i - 1][1] == recs[i - 2][1] == "D":
                bs = int(recs[i][2])
                octave = 2 ** round(math.log2(max(1, bs)))
                by.setdefault(octave, []).append((bs, (recs[i + 1][0] - recs[i][0]) * 1000.0))
    return by


def rows(
    runs: list[list[list[Any]]], model: str, q: int, ctx: int, min_samples: int
) -> list[tuple[str, int, int, int, float, int]]:
    out = []
    for _, steps in sorted(served_steps(runs).items()):
        if len(steps) >= min_samples:
            bs = round(statistics.median(b for b, _ in steps))
            ms = round(statistics.median(m for _, m in steps), 3)
            out.append((model, bs, q, ctx, ms, len(steps)))
    return out


#: a server without a draft model, its decode step as served (``--nodraft``): the simulator
#: prices the no-spec server from it where a table has it (sim_predict), as specfsm's cost
#: model prices zero-tax PLAIN from ``plain_step``
NODRAFT_STEP_MODEL = "nodraft_step"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, required=True, help="one server's iter-*.jsonl")
    ap.add_argument("--plain", default="", help="run segments served in PLAIN")
    ap.add_argument("--spec", default="", help="run segments served in SPECULATING")
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--shape", default="1x3x4", help="topk x steps x K of SPECULATING")
    ap.add_argument(
        "--nodraft-traces",
        type=Path,
        action="append",
        default=[],
        help="a server's iter-*.jsonl without a draft model (repeatable: its segments are "
        "numbered across the files in the order given)",
    )
    ap.add_argument("--nodraft", default="", help="run segments of --nodraft-traces")
    ap.add_argument("--min-samples", type=int, default=30)
    ap.add_argument("--gap-s", type=float, default=1.5)
    args = ap.parse_args(argv)
    segs = segments(args.traces, args.gap_s)
    nodraft = [seg for f in args.nodraft_traces for seg in segments(f, args.gap_s)]

    def pick(of: list[list[list[Any]]], which: str) -> list[list[list[Any]]]:
        return [of[int(i)] for i in which.split(",") if i]

    k = int(args.shape.split("x")[2])
    out = rows(pick(segs, args.plain), "plain_step", 1, args.ctx, args.min_samples)
    out += rows(pick(segs, args.spec), f"spec_step_{args.shape}", k, args.ctx, args.min_samples)
    out += rows(pick(nodraft, args.nodraft), NODRAFT_STEP_MODEL, 1, args.ctx, args.min_samples)
    w = sys.stdout
    w.write("model,bs,q,ctx,ms_per_step\n")
    for model, bs, q, ctx, ms, n in out:
        w.write(f"{model},{bs},{q},{ctx},{ms}\n")
        print(f"# {model} bs {bs}: {n} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
