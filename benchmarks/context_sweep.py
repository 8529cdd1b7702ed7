"""Context-aware vs context-blind GoodputPolicy, simulated side by side in one run.

Every run is scored on the in-engine H200 table over ctx 1024 and 4096 (real SGLang 0.5.17,
flashinfer; the simulator prices each decode step at its batch's mean KV length). Three
specfsm-warm policies (GoodputPolicy, warm PLAIN: what the SGLang adapter ships) differ only in
the table they are FITTED on:

  blind-1024   the ctx 1024 table alone (what a context-blind operator tunes on short prompts)
  blind-4096   the ctx 4096 table alone
  ctx-aware    both tables: each iteration is priced at the batch's mean KV length

against the static choices (no-spec, always-spec) at fixed concurrency 1..128, for short
prompts (768-1280 tokens), long prompts (3072-5120) and mixed prompts (256-6144); chain of 3
and the seeds' tree; alpha 0.6 and 0.8. Prints, per cell, tokens/s relative to the better static
choice, then one summary line per policy (min and mean over cells).

Caveat: fit and score share the ctx 1024 + 4096 measurements (in-sample for ctx-aware); this
isolates what knowing the context is worth, not calibration error (see policy_sweep.py for that).

Writes each run to DIR/context_sweep_runs.jsonl as it finishes (--resume reuses them), then
DIR/context_sweep.csv, the summary lines, and last the plot DIR/context_sweep.png (a failing
plot is reported in one line).

Usage: python benchmarks/context_sweep.py [--quick] [--jobs N] [--out DIR] [--resume]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from specfsm.model.acceptance import DraftShape, accept_length
from specfsm.model.costs import CostModel, load_table
from specfsm.policy.goodput import GoodputPolicy
from specfsm.sim.engine import run
from specfsm.sim.peers import Controller, FixedController, FSMController
from specfsm.sim.sweep import Journal, draw_optional, run_tasks, table_digests
from specfsm.sim.traces import Workload, fixed_concurrency

T1024 = "h200_sglang0517_llama8b"
T4096 = "h200_sglang0517_llama8b_ctx4096"
MERGED = f"{T1024}+{T4096}"
SHAPES = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}
ALPHAS = (0.6, 0.8)
LEVELS = (1, 2, 4, 8, 16, 32, 64, 128)
WORKLOADS = {
    "short": Workload(prompt_len=(768, 1280), output_len=(128, 640), max_running=128),
    "long": Workload(prompt_len=(3072, 5120), output_len=(128, 640), max_running=128),
    "mixed": Workload(prompt_len=(256, 6144), output_len=(128, 640), max_running=128),
}
POLICIES = ("no-spec", "always-spec", "blind-1024", "blind-4096", "ctx-aware")
SPECFSM = ("blind-1024", "blind-4096", "ctx-aware")


def _controller(name: str, shape: DraftShape, alpha: float) -> Controller:
    if name == "no-spec":
        return FixedController(False, shape)
    if name == "always-spec":
        return FixedController(True, shape)
    table = {"blind-1024": T1024, "blind-4096": T4096, "ctx-aware": MERGED}[name]
    policy = GoodputPolicy(CostModel(load_table(table), shape), accept_length(alpha, shape))
    return FSMController(name, policy, shape)


def _task(args: tuple[str, float, str, int, str, int, int]) -> float:
    sn, alpha, wl, level, name, iters, warm = args
    shape = SHAPES[sn]
    score = CostModel(load_table(MERGED), shape)
    r = run(
        _controller(name, shape, alpha),
        fixed_concurrency(level),
        score,
        alpha,
        workload=WORKLOADS[wl],
        iterations=iters + warm,
        warmup_iterations=warm,
    )
    return r.tok_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: fewer iterations")
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=800)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="out/context_sweep")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the finished runs in --out's context_sweep_runs.jsonl")  # fmt: skip
    a = ap.parse_args(argv)
    if a.quick:
        a.iterations, a.warmup = 400, 100
    tasks = [
        (sn, alpha, wl, level, name, a.iterations, a.warmup)
        for sn in SHAPES
        for alpha in ALPHAS
        for wl in WORKLOADS
        for level in LEVELS
        for name in POLICIES
    ]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"tables": table_digests([T1024, T4096])}
    journal = Journal(str(out / "context_sweep_runs.jsonl"), meta, a.resume)
    print(f"context sweep: {len(tasks)} simulated runs, score table {MERGED}", flush=True)
    if a.resume:
        print(journal.note, file=sys.stderr, flush=True)
    t0 = time.time()
    toks = run_tasks(_task, tasks, jobs=a.jobs, journal=journal, encode=float, decode=float,
                     label="context sweep", method="spawn")  # fmt: skip
    journal.close()
    res: dict[tuple[Any, ...], float] = {t[:5]: tok for t, tok in zip(tasks, toks, strict=True)}
    ratios: dict[str, list[tuple[float, tuple[Any, ...]]]] = {p: [] for p in SPECFSM}
    by_wl: dict[tuple[str, str], list[float]] = {}
    with (out / "context_sweep.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["shape", "alpha", "workload", "concurrency", *POLICIES, *(
            f"{p}_vs_best_static" for p in SPECFSM)])  # fmt: skip
        for sn in SHAPES:
            for alpha in ALPHAS:
                print(f"\n{sn} alpha {alpha}: tokens/s relative to the better static choice")
                print(f"  {'workload':8} {'conc':>4} " + " ".join(f"{p:>11}" for p in SPECFSM))
                for wl in WORKLOADS:
                    for level in LEVELS:
                        row = {p: res[(sn, alpha, wl, level, p)] for p in POLICIES}
                        best = max(row["no-spec"], row["always-spec"])
                        rel = {p: row[p] / best for p in SPECFSM}
                        for p in SPECFSM:
                            ratios[p].append((rel[p], (sn, alpha, wl, level)))
                            by_wl.setdefault((p, wl), []).append(rel[p])
                        w.writerow([sn, alpha, wl, level, *(f"{row[p]:.1f}" for p in POLICIES),
                                    *(f"{rel[p]:.4f}" for p in SPECFSM)])  # fmt: skip
                        print(
                            f"  {wl:8} {level:4d} " + " ".join(f"{rel[p]:11.3f}" for p in SPECFSM)
                        )
    print(f"\nwrote {out / 'context_sweep.csv'} in {time.time() - t0:.0f}s\n")
    for wl in WORKLOADS:
        print(f"mean_ratio_vs_best_static[{wl}]: " + ", ".join(
            f"{p} {sum(by_wl[(p, wl)]) / len(by_wl[(p, wl)]):.3f}" for p in SPECFSM))  # fmt: skip
    for p in SPECFSM:
        worst, where = min(ratios[p])
        mean = sum(r for r, _ in ratios[p]) / len(ratios[p])
        print(f"min_ratio_vs_best_static[{p}]: {worst:.3f} at {where}; mean {mean:.3f}")
    png = out / "context_sweep.png"
    if not draw_optional([(str(png), partial(_plot, res, png))]):
        print(f"wrote {png}")
    return 0


def _plot(res: dict[tuple[Any, ...], float], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(5 * len(WORKLOADS), 3.8), sharey=True)
    sn, alpha = "chain3", 0.6
    for ax, wl in zip(axes, WORKLOADS, strict=True):
        for p in SPECFSM:
            ys = []
            for level in LEVELS:
                best = max(res[(sn, alpha, wl, level, "no-spec")],
                           res[(sn, alpha, wl, level, "always-spec")])  # fmt: skip
                ys.append(res[(sn, alpha, wl, level, p)] / best)
            ax.plot(LEVELS, ys, marker="o", label=p)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{wl} prompts ({sn}, alpha {alpha})")
        ax.set_xlabel("concurrent requests")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("tokens/s / better static choice")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
