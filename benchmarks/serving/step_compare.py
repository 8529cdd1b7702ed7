"""Two servers' iterations as served, side by side: where one server's time goes beyond the other's.

From the per-iteration traces (`--iter-trace`, ``iters/<server>/iter-*.jsonl``) of runs of the
same trace on two servers (say pinned PLAIN on a speculative server, A, and the server without
a draft, B), two tables:

- ``decode``: the median gap from a decode launch to the next launch (two decode iterations
  before it, as `served_steps.py` takes them) per batch size, and the ratio A / B;
- ``around prefill``: for every prefill iteration followed by three decodes, the gaps from the
  prefill's launch to each of the next four launches, by prompt size, medians and A - B. With
  overlap scheduling the prefill's GPU time lands in the first decode gaps after it, so a cost
  a server adds per prefill (host or GPU) shows there and not in the decode table.

    python benchmarks/serving/step_compare.py \\
        --a traces/iters/specfsm/iter-1739.jsonl:2,6 --b traces/iters/nospec/iter-705.jsonl:4,6

``FILE:SEGMENTS`` names run segments of a trace file (0-based, cut where no iteration launched
for `--gap-s` seconds; a segment is one run, `served_steps.py`); several ``--a`` / ``--b``
are pooled. ``FILE=SERVER/TRACE@START-END,...`` with ``--runs runs.jsonl`` takes windows of
seconds after each recorded run's start instead, e.g. a switching server's PLAIN stretches:

    python benchmarks/serving/step_compare.py --runs runs.jsonl --min-samples 8 --bin 8 \
        --a iters/specfsm/iter-3244.jsonl=specfsm_goodput/bursty@8-16.5,22-28 \
        --b iters/nospec/iter-785.jsonl=nospec/bursty@8-16.5,22-28

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from served_steps import segments, served_steps

#: prompt-size buckets of the around-prefill table (tokens, upper bounds)
BUCKETS = (300, 1000, 2500, 1 << 30)
Runs = list[list[list[Any]]]


def windows_of(spec: str, runs_path: Path | None) -> Runs:
    """``FILE=SERVER/TRACE@S-E,S-E`` -> the iterations of FILE inside each window, in seconds
    after the start (``t0``) of every run of SERVER on TRACE that ``runs_path`` records: one
    stretch per window and run, so that a gap never bridges two. The way to take one mode's
    stretches out of a run that switched (where the transition log puts it in PLAIN, say).
    A window FILE holds no iteration of is left out: a server started twice (``--bracket``)
    writes one file per start, each holding the runs of its own start."""
    if runs_path is None:
        raise SystemExit(f"{spec}: a run's windows need --runs (the folder's runs.jsonl)")
    path, _, rest = spec.partition("=")
    who, _, wins = rest.partition("@")
    server, _, trace = who.partition("/")
    if not wins:
        raise SystemExit(f"{spec}: no windows (@START-END,START-END in seconds)")
    try:
        spans = [(float(w.split("-", 1)[0]), float(w.split("-", 1)[1])) for w in wins.split(",")]
    except (IndexError, ValueError):
        raise SystemExit(f"{spec}: windows are START-END in seconds, comma-separated") from None
    with open(path) as fh:
        recs = [json.loads(x) for x in fh if x.strip()]
    with open(runs_path) as fh:
        runs = [json.loads(x) for x in fh if x.strip()]
    t0s = [r["t0"] for r in runs if r.get("server") == server and r.get("trace") == trace]
    if not t0s:
        raise SystemExit(f"{spec}: {runs_path} holds no run of {server} on {trace} with its t0")
    got = [[x for x in recs if t0 + a <= x[0] < t0 + b] for t0 in t0s for a, b in spans]
    if not any(got):
        raise SystemExit(f"{spec}: {path} holds no iteration inside those windows")
    return [w for w in got if w]


def pick(specs: list[str], gap_s: float, runs_path: Path | None = None) -> Runs:
    """``FILE:SEG,SEG`` -> those run segments (all of the file's without ``:``);
    ``FILE=SERVER/TRACE@S-E,...`` -> windows of recorded runs (`windows_of`)."""
    out: Runs = []
    for spec in specs:
        if "=" in spec:
            out += windows_of(spec, runs_path)
            continue
        path, _, which = spec.partition(":")
        segs = segments(Path(path), gap_s)
        out += [segs[int(i)] for i in which.split(",")] if which else segs
    return out


def decode_gaps(runs: Runs, bin_bs: int = 1) -> dict[int, list[float]]:
    """Decode gaps (ms) per batch size (``bin_bs`` > 1: per bin of that many sizes, keyed by
    its smallest): `served_steps.py`'s clean steps, not pooled into octaves."""
    by: dict[int, list[float]] = defaultdict(list)
    for steps in served_steps(runs).values():
        for bs, ms in steps:
            by[bs // bin_bs * bin_bs].append(ms)
    return by


def bucket(tokens: int) -> int:
    return next(b for b in BUCKETS if tokens < b)


def prefill_gaps(runs: Runs) -> dict[int, list[list[float]]]:
    """Per prompt-size bucket, per prefill: its four gaps (prefill -> D1 -> D2 -> D3 -> next)."""
    by: dict[int, list[list[float]]] = defaultdict(list)
    for recs in runs:
        for i in range(len(recs) - 4):
            if recs[i][1] == "E" and all(recs[i + k][1] == "D" for k in (1, 2, 3)):
                gaps = [(recs[i + k + 1][0] - recs[i + k][0]) * 1000.0 for k in range(4)]
                by[bucket(int(recs[i][3]))].append(gaps)
    return by


def decode_table(a: Runs, b: Runs, min_samples: int, bin_bs: int = 1) -> list[str]:
    """One row per batch size (or bin) with enough steps on both sides, then their A / B
    ratios averaged with weights min(steps A, steps B)."""
    ga, gb = decode_gaps(a, bin_bs), decode_gaps(b, bin_bs)
    out = ["# decode: bs, A median ms (steps), B median ms (steps), A / B"]
    num = den = 0.0
    for bs in sorted(set(ga) & set(gb)):
        if len(ga[bs]) >= min_samples and len(gb[bs]) >= min_samples:
            ma, mb = statistics.median(ga[bs]), statistics.median(gb[bs])
            name = f"{bs}-{bs + bin_bs - 1}" if bin_bs > 1 else f"{bs}"
            out.append(
                f"decode[bs={name}]: {ma:.3f} ({len(ga[bs])}) {mb:.3f} ({len(gb[bs])}) "
                f"{ma / mb:.3f}"
            )
            w = min(len(ga[bs]), len(gb[bs]))
            num, den = num + w * ma / mb, den + w
    if den:
        out.append(f"decode[weighted]: A / B {num / den:.3f} over {len(out) - 1} rows")
    return out


def prefill_table(a: Runs, b: Runs, min_samples: int) -> list[str]:
    pa, pb = prefill_gaps(a), prefill_gaps(b)
    out = ["# around prefill: gap k after a prefill's launch, A median, B median, A - B (ms)"]
    lo = 0
    for hi in BUCKETS:
        xa, xb = pa.get(hi, []), pb.get(hi, [])
        name = f"{lo}-{hi - 1}" if hi < BUCKETS[-1] else f"{lo}+"
        lo = hi
        if len(xa) < min_samples or len(xb) < min_samples:
            continue
        cells = []
        for k in range(4):
            ma = statistics.median(g[k] for g in xa)
            mb = statistics.median(g[k] for g in xb)
            cells.append(f"g{k} {ma:.2f}/{mb:.2f} ({ma - mb:+.2f})")
        sa = statistics.median(sum(g[:3]) for g in xa)
        sb = statistics.median(sum(g[:3]) for g in xb)
        out.append(
            f"prefill[tokens={name}]: n {len(xa)}/{len(xb)}; " + "; ".join(cells)
            + f"; g0-g2 {sa:.2f}/{sb:.2f} ({sa - sb:+.2f})"
        )  # fmt: skip
    return out


def totals(runs: Runs) -> str:
    iters = sum(len(r) for r in runs)
    pre = sum(1 for r in runs for x in r if x[1] == "E")
    span = sum(r[-1][0] - r[0][0] for r in runs)
    return f"{len(runs)} runs, {span:.1f} s, {iters} iterations, {pre} prefills"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", action="append", required=True, help="FILE:SEG,SEG (server A)")
    ap.add_argument("--b", action="append", required=True, help="FILE:SEG,SEG (server B)")
    ap.add_argument("--min-samples", type=int, default=20)
    ap.add_argument("--gap-s", type=float, default=1.5)
    ap.add_argument("--runs", type=Path, default=None, help="runs.jsonl, for FILE=... specs")
    ap.add_argument("--bin", type=int, default=1, help="decode rows per bin of batch sizes")
    args = ap.parse_args(argv)
    if args.bin < 1:
        ap.error("--bin: at least 1 (batch sizes per decode row)")
    a, b = pick(args.a, args.gap_s, args.runs), pick(args.b, args.gap_s, args.runs)
    print(f"# A: {totals(a)}\n# B: {totals(b)}")
    table = decode_table(a, b, args.min_samples, args.bin)
    for line in table + prefill_table(a, b, args.min_samples):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
