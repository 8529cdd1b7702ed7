"""What the simulator and the tuner print and write: tables, CSV, plots (and the progress bar,
`specfsm.progress`)."""

from __future__ import annotations

import csv
from collections.abc import Sequence

from specfsm.progress import Progress as _Progress
from specfsm.sim.engine import RunResult

# ------------------------------------------------------------------------------ output
# the progress bar is specfsm's one bar (specfsm.progress), re-exported for the sim's callers
Progress = _Progress


COLS = (
    "policy",
    "tok_s",
    "tpot_mean_ms",
    "tpot_token_weighted_ms",
    "tpot_wall_avg_ms",
    "tpot_p50_ms",
    "tpot_p99_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "switches_per_100",
    "time_speculating",
    "time_draining",
    "time_plain",
    "time_resyncing",
    "iterations",
)


def format_table(rows: Sequence[dict[str, object]], cols: Sequence[str] = COLS) -> str:
    hdr = [c.replace("time_", "t_").replace("_ms", "") for c in cols]
    cells = [[str(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(h), *(len(x[i]) for x in cells)) for i, h in enumerate(hdr)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(hdr, widths, strict=True))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(cell, widths, strict=True)) for cell in cells]
    return "\n".join(lines)


def write_csv(path: str, rows: Sequence[dict[str, object]]) -> None:
    if not rows:
        return
    keys = list(rows[0])
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def plot_throughput(
    path: str, levels: Sequence[int], by_policy: dict[str, list[float]], title: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, ys in by_policy.items():
        style = "-" if name.startswith("specfsm") else "--"
        ax.plot(
            levels,
            ys,
            style,
            marker="o",
            ms=3,
            label=name,
            lw=2 if name.startswith("specfsm") else 1,
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("output tokens/s (simulated)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(path: str, results: Sequence[RunResult], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from specfsm.logtools.timeline_plot import draw_mode_timeline, spans_from_samples

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 1.9 * len(results)), sharex=True)
    if len(results) == 1:
        axes = [axes]
    for ax, r in zip(axes, results, strict=True):
        tl = r.timeline or []
        spans = spans_from_samples([(t, m) for t, _, m in tl])
        draw_mode_timeline(ax, spans, [x[0] for x in tl], [x[1] for x in tl])
        ax.set_title(f"{r.policy}: {r.switches} switches", fontsize=8)
    axes[-1].set_xlabel("simulated time (s)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
