"""`specfsm sim`: every policy side by side on one load (fixed concurrency levels or a
time-varying trace), per-load tables, CSV and PNG plots into --out (default out/): sim.csv is
rewritten after each load, the plots are drawn last (a failing one is reported in one line).

Needs the ``sim`` extra (numpy, matplotlib); without it the command says so in one line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from functools import partial

from specfsm.cli.args import (
    ArgParser,
    UsageError,
    add_command,
    draft_shape,
    nonnegative_int,
    positive_float,
    positive_float_list,
    positive_int,
    positive_int_list,
    probability,
    require_extra,
)
from specfsm.cli.tune import plain_variant
from specfsm.model.acceptance import (
    NAMED_SHAPES,
)
from specfsm.model.costs import (
    PLAIN_VARIANTS,
    PLAIN_ZERO_TAX,
)
from specfsm.sim.engine import run
from specfsm.sim.peers import (
    POLICY_NAMES,
    SPECFSM_NAMES_BY_PLAIN,
    WARM_NAME,
    ZERO_TAX_NAME,
    lineup,
)
from specfsm.sim.report import Progress, format_table, plot_throughput, plot_timeline, write_csv
from specfsm.sim.sweep import draw_optional
from specfsm.sim.traces import Load, fixed_concurrency, named_traces, poisson
from specfsm.sim.tune import cost_model, plain_priced

#: the default fit table: the one measured inside the SGLang engine, both PLAIN steps included
FIT_TABLE = "h200_sglang0517_llama8b"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(subparsers, "sim", "serving simulator: policies side by side", main)


def policy_names(text: str) -> list[str]:
    """Comma-separated names out of POLICY_NAMES (empty: all)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown policy {', '.join(map(repr, unknown))} "
            f"(choose from {', '.join(POLICY_NAMES)})"
        )
    return names


def _parser() -> ArgParser:
    ap = ArgParser(prog="specfsm sim", description=__doc__)
    ap.add_argument(
        "--fit-table", default=FIT_TABLE, help=f"table the policies are tuned on ({FIT_TABLE})"
    )
    ap.add_argument(
        "--table", default=None, help="table the run is scored on (default: --fit-table)"
    )
    ap.add_argument("--ctx", type=positive_int, default=None)
    ap.add_argument("--shape", type=draft_shape, default=NAMED_SHAPES["chain3"])
    ap.add_argument("--alpha", type=probability, default=0.8)
    ap.add_argument(
        "--levels",
        type=positive_int_list,
        default="1,2,4,8,16,32,64,128,256",
        help="fixed-concurrency levels (comma list); empty to skip",
    )
    ap.add_argument(
        "--poisson", type=positive_float_list, default="", help="Poisson rates req/s (comma list)"
    )
    ap.add_argument("--trace", choices=["none", "ramp", "bursts", "sine", "all"], default="none")
    ap.add_argument(
        "--duration", type=positive_float, default=300.0, help="trace length, simulated s"
    )
    ap.add_argument("--iterations", type=positive_int, default=3000, help="per fixed level")
    ap.add_argument("--warmup", type=nonnegative_int, default=500)
    ap.add_argument(
        "--policies",
        type=policy_names,
        default="",
        help=f"comma list of names (default: all): {', '.join(POLICY_NAMES)}",
    )
    ap.add_argument(
        "--plain",
        type=plain_variant,
        choices=list(PLAIN_VARIANTS),
        default=PLAIN_ZERO_TAX,
        help="the PLAIN implementation of the specfsm controllers in the default line-up: "
        f"zero_tax (the SGLang adapter's default: {', '.join(SPECFSM_NAMES_BY_PLAIN['zero_tax'])})"
        f" or warm ({', '.join(SPECFSM_NAMES_BY_PLAIN['warm'])}); default zero_tax. "
        "--policies names any controller whatever --plain says",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out")
    ap.add_argument("--no-progress", action="store_true")
    return ap


#: The timelines worth a plot: the shipped specfsm and the two adaptive peers.
TIMELINE_POLICIES = (WARM_NAME, ZERO_TAX_NAME, "sglang-adaptive", "vllm-bs-table")


def _loads(a: argparse.Namespace) -> list[tuple[Load, int | None, int]]:
    """(load, iterations or None for a timed trace, warm-up iterations) per requested load."""
    pick = {"ramp": ["ramp"], "bursts": ["bursts"], "sine": ["sine"]}
    trace_names = pick.get(a.trace, ["ramp", "bursts", "sine"] if a.trace == "all" else [])
    if not (a.levels or a.poisson or trace_names):
        raise UsageError("nothing to run: --levels is empty and no --poisson or --trace given")
    loads: list[tuple[Load, int | None, int]] = []
    loads += [(fixed_concurrency(c), a.iterations + a.warmup, a.warmup) for c in a.levels]
    loads += [(poisson(r, a.duration), None, 0) for r in a.poisson]
    tr = named_traces(a.duration)
    loads += [(tr[k], None, 0) for k in trace_names]
    return loads


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    require_extra("", "sim", "numpy", "matplotlib")
    fit = cost_model("--fit-table", a.fit_table, a.shape, a.ctx)
    score = cost_model(
        "--table" if a.table else "--fit-table", a.table or a.fit_table, a.shape, a.ctx
    )
    a.plain_priced = [f"scored: {plain_priced(score, a.plain)}", *score.estimates(a.plain)]
    levels: list[int] = a.levels
    loads = _loads(a)
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {a.out}: cannot create: {exc.strerror}") from None
    if (a.table or a.fit_table) == a.fit_table:
        print("warning: scored on the table the policies were fitted on", file=sys.stderr)
    names = a.policies or None
    print(f"specfsm PLAIN: {a.plain} ({', '.join(a.plain_priced)})", file=sys.stderr)
    n_pol = len(lineup(fit, a.shape, a.alpha, names=names, plain=a.plain))
    prog = Progress(len(loads) * n_pol, "sim", not a.no_progress)
    all_rows: list[dict[str, object]] = []
    tput: dict[str, list[float]] = {}
    plots: list[tuple[str, Callable[[], None]]] = []  # drawn once every table is out
    for load, iters, warm in loads:
        rows = []
        timelines = []
        for ctl in lineup(fit, a.shape, a.alpha, names=names, plain=a.plain):
            r = run(
                ctl,
                load,
                score,
                a.alpha,
                seed=a.seed,
                iterations=iters,
                warmup_iterations=warm,
                record_timeline=iters is None,
            )
            rows.append(r.row())
            if iters is not None:
                tput.setdefault(ctl.name, []).append(r.tok_s)
            elif ctl.name in TIMELINE_POLICIES:
                timelines.append(r)
            prog.tick(f"{load.name} {ctl.name}")
        print(
            f"\n== load {load.name}  (shape {a.shape.label()}, alpha {a.alpha}, "
            f"fit {fit.table.source}, score {score.table.source})"
        )
        print(format_table(rows))
        all_rows += rows
        write_csv(os.path.join(a.out, "sim.csv"), all_rows)
        if timelines:
            path = os.path.join(a.out, f"timeline_{load.name.replace('/', '_')}.png")
            title = f"{load.name}, {a.shape.label()}, alpha {a.alpha}"
            plots.append((path, partial(plot_timeline, path, timelines, title)))
    if levels and tput:
        path = os.path.join(a.out, "throughput_vs_concurrency.png")
        title = f"{a.shape.label()}, alpha {a.alpha}, scored on {score.table.source}"
        plots.append((path, partial(plot_throughput, path, levels, tput, title)))
    failed = draw_optional(plots, sys.stderr)
    drawn = "plots" if not failed else f"{len(plots) - failed} of {len(plots)} plots"
    print(f"\nwrote {a.out}/sim.csv and {drawn}", file=sys.stderr)
    return 0 if all(math.isfinite(float(str(r["tok_s"]))) for r in all_rows) else 1
