"""What a prefill costs beyond its GPU time per prompt token: each server's fixed time per
prefill iteration, read from the per-iteration traces of a results folder (no device).

With overlap on, SGLang launches iteration i+2 once iteration i's result is in (its forward
done on the GPU) and iteration i+2 is planned, so in a string of prefills the gap from launch
i+1 to launch i+2 is prefill i's GPU time plus what does not scale with its tokens: GPU work
outside the target's forward, and the host work between a wait for the GPU (a prefill's
planning waits for it) and the next launch, while the GPU idles:

    gap(i+1 -> i+2) = slope * prompt tokens of prefill i + fixed

Fitted over every three prefills in a row (E or M records of ``SPECFSM_ITER_TRACE``,
benchmarks/gpu/sitecustomize.py) with one slope per driver (one card: the per-token GPU time of
the target's prefill, the same model on every server) and one ``fixed`` per run. A specfsm
run counts only the prefills launched while PLAIN (its transition log), the ones a no-spec
server is compared with. Under a burst that prefill binds (bursty's 40 requests a second on an
H100: about one second of prefill GPU time per second), each millisecond more per prefill is a
millisecond less for the decodes fitted between them, which make the tokens a client sees.

    python benchmarks/serving/prefill_gaps.py benchmarks/gpu/results/2026-12-07_serving_h100_*

(each folder's ``*/traces_logs_*.tgz`` beside its driver's ``runs.jsonl``; ``--trace`` picks the
trace, bursty by default; ``--skip-s S`` leaves out each busy phase's first S seconds).
"""

from __future__ import annotations

import argparse
import bisect
import io
import json
import re
import statistics
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from servers import SERVERS, server_of

T = TypeVar("T")

#: the host parts of a loop iteration an iteration record ends with (SPECFSM_ITER_PHASES,
#: benchmarks/gpu/hook_phases.py): ms since the launch before, in this order
PHASES = ("run", "worker", "target", "plan", "result", "next")

#: prompt-token bins of the prefill whose GPU time a gap holds: where the host binds (small
#: prefills, whose GPU time is shorter than the loop's host work) and where the GPU does
SIZE_BINS = ((0, 2000), (2000, 5000), (5000, 8000), (8000, None))

#: the server whose runs the others' fixed time is set beside; the others fitted are the specfsm
#: server's runs, whose PLAIN prefills run the target alone on the GPU, as this server's do
REFERENCE = "nospec"


@dataclass
class Driver:
    """One driver's prefill strings: (prompt tokens of prefill i, gap i+1 -> i+2 in ms) per
    run label ``SERVER:rep``."""

    name: str
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    #: per run label, the host ms of each gap's parts (``PHASES``), where the trace has them
    phases: dict[str, list[list[float]]] = field(default_factory=dict)


@dataclass
class Fit:
    """One driver's fit: the common slope (us per prompt token) and each run's fixed ms."""

    name: str
    slope_us: float
    fixed_ms: dict[str, float]
    n: dict[str, int]


def _members(tgz: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(tgz) as tf:
        for m in tf.getmembers():
            if m.isfile() and ("/iters/" in "/" + m.name or m.name.endswith("rank0.jsonl")):
                fh = tf.extractfile(m)
                if fh is not None:
                    out[m.name] = fh.read()
    return out


def _jsonl(data: bytes) -> list[Any]:
    return [json.loads(s) for s in io.StringIO(data.decode()) if s.strip()]


def busiest(phases: list[str], phase_s: float) -> list[tuple[float, float]]:
    """The (start, end) seconds of the trace's phases at its highest level (the number in a
    phase's label: ``rps40``, ``c32``): where a server is saturated and a prefill follows the
    last without waiting for arrivals (in a lull the gap to the next prefill is idle time)."""
    level = [float(m.group()) if (m := re.search(r"[0-9.]+", p)) else 0.0 for p in phases]
    top = max(level, default=0.0)
    return [(i * phase_s, (i + 1) * phase_s) for i, v in enumerate(level) if v == top]


def load_driver(tgz: Path, trace: str, skip_s: float = 0.0) -> Driver:
    """The prefill strings of every run of `trace` in the driver whose traces `tgz` holds (its
    ``runs.jsonl`` beside it), each busy phase's first `skip_s` seconds left out (where a
    policy's switch lands among the prefills)."""
    files = _members(tgz)
    rows: dict[str, list[list[Any]]] = {}
    trans: list[dict[str, Any]] = []
    for name, data in files.items():
        parts = name.split("/")
        if "iters" in parts[:-1]:
            server = parts[parts.index("iters") + 1]
            rows.setdefault(server, []).extend(_jsonl(data))
        elif name.endswith("specfsm/transitions-rank0.jsonl"):
            trans = [x for x in _jsonl(data) if x.get("event") == "specfsm.transition"]
    for r in rows.values():
        r.sort(key=lambda x: x[0])
    trans_ts = [x["ts"] for x in trans]

    def plain(t: float) -> bool:
        i = bisect.bisect_right(trans_ts, t)
        return bool(i) and trans[i - 1]["dst"] == "PLAIN"

    heads = _jsonl((tgz.parent / "runs.jsonl").read_bytes())
    busy: list[tuple[float, float]] = []
    for h in heads:
        if trace in h.get("traces", {}) and h.get("phase_s"):
            busy = busiest(h["traces"][trace], float(h["phase_s"]))
    drv = Driver(tgz.parent.name)
    for r in heads:
        if r.get("trace") != trace or "t0" not in r:
            continue
        server = server_of(r["server"], SERVERS)
        if server not in (REFERENCE, "specfsm"):
            continue  # a draft's prefill on the GPU too, or another server's log: not fitted
        recs = rows.get(server, [])
        pts = drv.points.setdefault(f"{r['server']}:{r['rep']}", [])
        for p0, p1 in busy:
            lo = bisect.bisect_left(recs, [r["t0"] + p0 + skip_s])
            hi = bisect.bisect_left(recs, [r["t0"] + p1])
            win = recs[lo:hi]
            for a, b, c in zip(win, win[1:], win[2:], strict=False):
                if not all(x[1] in "EM" for x in (a, b, c)):
                    continue
                if server == "specfsm" and not (plain(a[0]) and plain(c[0])):
                    continue
                pts.append((float(a[3]), 1e3 * (c[0] - b[0])))
                if len(c) >= 7 + len(PHASES):  # record c: the host parts of the gap b -> c
                    drv.phases.setdefault(f"{r['server']}:{r['rep']}", []).append(
                        [float(x) for x in c[7 : 7 + len(PHASES)]] + [1e3 * (c[0] - b[0])]
                    )
    drv.points = {k: v for k, v in drv.points.items() if v}
    return drv


def _centred(pts: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """The means of x and y and the sums of (x - mean)^2 and (x - mean)(y - mean)."""
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    sxy = sum((x - mx) * (y - my) for x, y in pts)
    return mx, my, sxx, sxy


def _per_server(by_run: dict[str, list[T]]) -> dict[str, list[T]]:
    """A driver's per-run lists (``SERVER:rep`` keys) pooled per server, in key order."""
    out: dict[str, list[T]] = {}
    for k, v in sorted(by_run.items()):
        out.setdefault(k.rsplit(":", 1)[0], []).extend(v)
    return out


def fit(drv: Driver, min_points: int = 20) -> Fit | None:
    """One slope over the driver's runs (each run's points centred on its own means), then each
    run's fixed time at its means. None: no run with `min_points` strings."""
    use = {k: v for k, v in drv.points.items() if len(v) >= min_points}
    sxx = sxy = 0.0
    for pts in use.values():
        _, _, dxx, dxy = _centred(pts)
        sxx += dxx
        sxy += dxy
    if not use or sxx <= 0:
        return None
    slope = sxy / sxx  # ms per token
    fixed = {
        k: statistics.fmean(y for _, y in pts) - slope * statistics.fmean(x for x, _ in pts)
        for k, pts in use.items()
    }
    return Fit(drv.name, 1e3 * slope, fixed, {k: len(v) for k, v in use.items()})


def by_server(f: Fit) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for k, v in sorted(f.fixed_ms.items()):
        out.setdefault(k.rsplit(":", 1)[0], []).append(v)
    return out


def report(fits: list[Fit]) -> list[str]:
    """Per driver: the slope, each server's fixed ms per run and its mean less the reference
    server's mean on the same driver; then those differences pooled over the drivers."""
    lines: list[str] = []
    pooled: dict[str, list[float]] = {}
    for f in fits:
        per = by_server(f)
        ref = statistics.fmean(per[REFERENCE]) if REFERENCE in per else None
        lines.append(f"{f.name}: slope {f.slope_us:.2f} us per prompt token")
        for s, v in per.items():
            runs = ", ".join(f"{x:.2f}" for x in v)
            n = sum(f.n[k] for k in f.n if k.rsplit(":", 1)[0] == s)
            d = "" if ref is None or s == REFERENCE else f"; {statistics.fmean(v) - ref:+.2f} ms"
            lines.append(
                f"  {s}: fixed {statistics.fmean(v):.2f} ms a prefill (runs {runs}; {n} strings){d}"
            )
            if ref is not None and s != REFERENCE:
                pooled.setdefault(s, []).extend(x - ref for x in v)
    for s, v in sorted(pooled.items()):
        spread = f", {min(v):+.2f} to {max(v):+.2f}" if len(v) > 1 else ""
        lines.append(
            f"prefill_fixed_vs_{REFERENCE}[{s}]: {statistics.fmean(v):+.2f} ms a prefill "
            f"(runs {len(v)}{spread}; each run against its driver's {REFERENCE} mean)"
        )
    return lines


def size_report(drivers: list[Driver], fits: list[Fit]) -> list[str]:
    """Per driver and server: the slope fitted to that server's strings alone (a part of a
    prefill's time that grows with its tokens shows there, where the common fit counts it in
    the fixed time), and the fixed time by the size of the prefill before (each gap less the
    driver's common slope times its tokens, averaged in ``SIZE_BINS``)."""
    lines: list[str] = []
    slopes = {f.name: f.slope_us / 1e3 for f in fits}
    for drv in drivers:
        if drv.name not in slopes:
            continue
        lines.append(f"{drv.name}: by server, its own slope and the fixed ms by prompt tokens")
        for srv, pts in _per_server(drv.points).items():
            mx, my, sxx, sxy = _centred(pts)
            own = sxy / sxx if sxx > 0 else 0.0
            cells = []
            for lo, hi in SIZE_BINS:
                r = [y - slopes[drv.name] * x for x, y in pts if lo <= x and (hi is None or x < hi)]
                name = f"{lo}-{hi}" if hi is not None else f"{lo}+"
                cells.append(f"{name} {statistics.fmean(r):.2f} ({len(r)})" if r else f"{name} -")
            lines.append(
                f"  prefill_by_size[{srv}]: own slope {1e3 * own:.2f} us a token "
                f"(fixed {my - own * mx:.2f} ms at its mean {mx:.0f} tokens); "
                f"fixed ms by tokens: {', '.join(cells)}"
            )
    return lines


def phase_report(drivers: list[Driver]) -> list[str]:
    """Per driver and server, the mean host ms of the parts of a gap in the prefill strings:
    the scheduler's launch (``run``) split into its own work, the model worker's and plugins'
    (worker less target), the target forward's less its attention planning, and the planning
    (a FlashInfer prefill waits for the GPU there); the result processing, the next batch's
    planning and the loop's rest; each beside the reference server's on the same driver."""
    lines: list[str] = []
    for drv in drivers:
        per = _per_server(drv.phases)
        if not per:
            continue
        means: dict[str, dict[str, float]] = {}
        for s, rows in per.items():
            cols = [statistics.fmean(col) for col in zip(*rows, strict=True)]
            run, worker, target, plan, result, nxt, gap = cols
            means[s] = {
                "sched": run - worker,
                "worker": worker - target,
                "target": target - plan,
                "plan": plan,
                "result": result,
                "next": nxt,
                "rest": gap - run - result - nxt,
                "gap": gap,
            }
        ref = means.get(REFERENCE)
        lines.append(f"{drv.name}: host ms a gap in the prefill strings, by part")
        for s, m in means.items():
            parts = " ".join(
                f"{k} {v:.2f}" + ("" if ref is None or s == REFERENCE else f" ({v - ref[k]:+.2f})")
                for k, v in m.items()
            )
            lines.append(f"  prefill_phases[{s}]: {parts} ({len(per[s])} gaps)")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--trace", default="bursty")
    ap.add_argument(
        "--skip-s",
        type=float,
        default=0.0,
        help="leave out each busy phase's first seconds (a policy's switch lands there)",
    )
    args = ap.parse_args(argv)
    fits: list[Fit] = []
    drivers: list[Driver] = []
    for folder in args.folders:
        for tgz in sorted(folder.glob("*/traces_logs_*.tgz")):
            drivers.append(drv := load_driver(tgz, args.trace, args.skip_s))
            if (got := fit(drv)) is not None:
                fits.append(got)
    if not fits:
        print(f"no prefill strings of {args.trace} in {', '.join(map(str, args.folders))}")
        return 1
    print("\n".join(report(fits) + size_report(drivers, fits) + phase_report(drivers)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
