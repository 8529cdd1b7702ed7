"""`specfsm logs timeline`: the simulator's mode-band plot (logtools.timeline_plot) for real logs.

One pair of panels per rank and run: decode batch size over iteration (or seconds with
x="time") and accept length below, the mode as bands behind both, every transition a tick.
Series come from observation lines, else from the policy inputs on transition lines. A long
log is downsampled to `max_points` buckets per series (mean, with the min..max envelope);
bands and transition ticks are never downsampled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from specfsm.logtools.reader import LogSet, Record, Run
from specfsm.logtools.summary import dwells

MAX_POINTS = 2000
MAX_PANELS = 8


@attrs.frozen
class Series:
    x: list[float]
    y: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None


def downsample(x: Sequence[float], y: Sequence[float], max_points: int = MAX_POINTS) -> Series:
    """At most `max_points` buckets of equal x width: mean, min and max of each (NaN = gap)."""
    pts = [(a, b) for a, b in zip(x, y, strict=True) if not math.isnan(b)]
    if len(pts) <= max_points:
        return Series(list(x), list(y))
    x0, x1 = pts[0][0], pts[-1][0]
    width = (x1 - x0) / max_points or 1.0
    buckets: dict[int, list[float]] = {}
    for a, b in pts:
        buckets.setdefault(min(int((a - x0) / width), max_points - 1), []).append(b)
    keys = sorted(buckets)
    return Series(
        [x0 + (k + 0.5) * width for k in keys],
        [sum(buckets[k]) / len(buckets[k]) for k in keys],
        [min(buckets[k]) for k in keys],
        [max(buckets[k]) for k in keys],
    )


def samples(run: Run) -> tuple[list[Record], str]:
    """The run's policy-input samples: observation lines, else transition lines."""
    if run.observations:
        return run.observations, "observation lines"
    seen: set[int] = set()
    out = []
    for t in run.transitions:
        if "bs" in t.data and t.iteration not in seen:
            seen.add(t.iteration)
            out.append(t)
    return out, "transition lines (no observation lines in this log)"


def sample_mode(rec: Record) -> str:
    """The mode the sample was taken in (an observation's mode; a transition's source)."""
    return str(rec.data.get("mode") or rec.data.get("src"))


def accept_len(rec: Record) -> float:
    """Mean accept length of a sample taken while SPECULATING (NaN otherwise: the adapter's
    accept_lens are the last K-wide round's, stale outside SPECULATING)."""
    lens = rec.data.get("accept_lens") or []
    if sample_mode(rec) != "SPECULATING" or not lens:
        return math.nan
    return float(sum(lens)) / len(lens)


def plot(
    logs: LogSet, out: str, x_axis: str = "iteration", max_points: int = MAX_POINTS
) -> list[str]:
    """Draw the timeline PNG to `out`; returns notes for the terminal (what was drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specfsm.logtools.timeline_plot import draw_mode_timeline

    panels = [
        (eng.name, rank, run)
        for eng in logs.engines()
        for rank in sorted(eng.ranks)
        for run in eng.ranks[rank]
    ]
    notes = []
    if len(panels) > MAX_PANELS:
        notes.append(f"{len(panels)} rank runs: drawing the first {MAX_PANELS}")
        panels = panels[:MAX_PANELS]
    if not panels:
        raise ValueError("no transition or observation lines to draw")
    fig, axes = plt.subplots(
        2 * len(panels),
        1,
        figsize=(10, 2.6 * len(panels)),
        squeeze=False,
        gridspec_kw={"height_ratios": [3, 2] * len(panels)},
    )
    for k, (eng_name, rank, run) in enumerate(panels):
        eng = " + ".join(Path(p).name for p in eng_name.split(" + "))
        ax_bs, ax_acc = axes[2 * k][0], axes[2 * k + 1][0]
        t0 = run.first_ts or 0.0

        def xof(it: int, ts: float | None, t0: float = t0) -> float:
            if x_axis == "time":
                return (ts - t0) if ts is not None else math.nan
            return float(it)

        spans = [
            (xof(d.start_it, d.start_ts), xof(d.end_it, d.end_ts), d.mode) for d in dwells(run)
        ]
        marks = [(xof(t.iteration, t.ts), str(t.data["dst"])) for t in run.transitions]
        recs, where = samples(run)
        xs = [xof(r.iteration, r.ts) for r in recs]
        bs = downsample(xs, [float(r.data.get("bs", math.nan)) for r in recs], max_points)
        acc = downsample(xs, [accept_len(r) for r in recs], max_points)
        band = (bs.lo, bs.hi) if bs.lo is not None and bs.hi is not None else None
        # a sample holds until the next one; sparse samples get a dot each
        dots: dict[str, Any] = {"marker": "o", "ms": 2} if len(bs.x) < 300 else {}
        draw_mode_timeline(
            ax_bs, spans, bs.x, bs.y, transitions=marks, y_band=band, drawstyle="steps-post", **dots
        )
        aband = (acc.lo, acc.hi) if acc.lo is not None and acc.hi is not None else None
        draw_mode_timeline(
            ax_acc,
            spans,
            acc.x,
            acc.y,
            ylabel="accept len",
            series_label="accept length (SPECULATING samples)",
            y_band=aband,
            legend=False,
            **dots,
        )
        ax_acc.sharex(ax_bs)
        ds = f", downsampled to {len(bs.x)} buckets" if bs.lo is not None else ""
        ax_bs.set_title(
            f"{eng} rank {rank} run {run.index}: {len(run.transitions)} transitions, "
            f"{run.last_iteration} iterations; series from {where}{ds}",
            fontsize=7,
        )
        notes.append(
            f"rank {rank} run {run.index} ({eng}): {len(run.transitions)} transitions marked, "
            f"{len(recs)} samples from {where.split(' (')[0]}{ds}"
        )
        ax_acc.set_xlabel(
            "seconds since the run's first line" if x_axis == "time" else "iteration", fontsize=8
        )
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return notes
