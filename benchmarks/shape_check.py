"""The shape-policy check: specfsm's GoodputPolicy choosing among PLAIN and every shape
of the grid vs the best static grid shape, per cell of fixed concurrency.

Fit on one table (the policy's prior), score on others (what the simulator charges, and what
the policy's self-calibration measures through `observe_step`); alpha per cell; the launch
shape chain3 (``--launch``). Per cell: each static shape of `specfsm.sim.baselines.STATIC_GRID`
and specfsm (``--plain`` zero_tax, the adapter's default) on the same load and seed; prints
specfsm / best static (the grid is the engine's states: the draft shapes and ``plain``,
specfsm's engine held in PLAIN, draft prefill paid) and the shape switches, then the minimum
ratio per (score table, alpha). ``ratio_nd`` (info): the same with the server without a draft
(``no-spec``, prefill by the target only) added, which specfsm's engine cannot match here where
PLAIN wins (this check prefills every request through the draft; the adapter defers the
draft's prefill while PLAIN, which benchmarks/policy_sweep.py models and this check does not).

Each run is written to --out's shape_check_runs.jsonl as it finishes (--resume reuses them).

    .venv/bin/python benchmarks/shape_check.py [--iterations 3000] [--jobs 2] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from specfsm.model.acceptance import parse_shape
from specfsm.model.costs import CostModel, load_table
from specfsm.sim.baselines import (
    NO_DRAFT_NAME,
    STATIC_GRID,
    best_static,
    no_draft_server,
    static_grid,
)
from specfsm.sim.engine import run
from specfsm.sim.peers import WARM_NAME, ZERO_TAX_NAME, Controller, lineup
from specfsm.sim.sweep import Journal, run_tasks, table_digests
from specfsm.sim.traces import fixed_concurrency

FIT = "h200_sglang0517_llama8b"
SCORES = ("h200_sglang0517_llama8b_triton", "h200_sglang0517_llama8b_ctx4096")
CONC = (1, 2, 4, 8, 16, 32, 64, 128, 256)
ALPHAS = (0.6, 0.8)


def _task(args: tuple[Any, ...]) -> tuple[float, int, str]:
    table, alpha, conc, pol, fit_name, launch, _plain, iters, warm, seed = args
    shape = parse_shape(launch)
    fit = CostModel(load_table(fit_name), shape)
    score = CostModel(load_table(table), shape)
    ctl: Controller
    if pol in STATIC_GRID:
        ctl = next(c for c in static_grid() if c.name == pol)
    elif pol == NO_DRAFT_NAME:
        ctl = no_draft_server()
    else:
        ctl = lineup(fit, shape, alpha, names=[pol])[0]
    r = run(ctl, fixed_concurrency(conc), score, alpha, seed=seed,
            iterations=iters + warm, warmup_iterations=warm)  # fmt: skip
    final = ""
    machine = getattr(ctl, "machine", None)
    if machine is not None and machine.shape is not None:
        final = f"{machine.mode.value}/{machine.shape.label()}"
    return r.tok_s, r.switches, final


def _decode(x: Any) -> tuple[float, int, str]:
    return float(x[0]), int(x[1]), str(x[2])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fit-table", default=FIT)
    ap.add_argument("--score-tables", default=",".join(SCORES))
    ap.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    ap.add_argument("--conc", default=",".join(map(str, CONC)))
    ap.add_argument("--launch", default="chain3", help="launch shape (chain3, tree, ...)")
    ap.add_argument("--plain", default="zero_tax", choices=["zero_tax", "warm"])
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="out/shape_check", help="where the runs are written")
    ap.add_argument("--resume", action="store_true",
                    help="reuse the finished runs in --out's shape_check_runs.jsonl")  # fmt: skip
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: levels 1 and 64, alpha 0.8, 300 iterations")  # fmt: skip
    a = ap.parse_args(argv)
    if a.quick:
        a.conc, a.alphas, a.iterations = "1,64", "0.8", 300
    pol = ZERO_TAX_NAME if a.plain == "zero_tax" else WARM_NAME
    tables = [t for t in a.score_tables.split(",") if t]
    alphas = [float(x) for x in a.alphas.split(",")]
    concs = [int(x) for x in a.conc.split(",")]
    tasks = [
        (t, al, c, p, a.fit_table, a.launch, a.plain, a.iterations, a.warmup, a.seed)
        for t in tables
        for al in alphas
        for c in concs
        for p in (*STATIC_GRID, NO_DRAFT_NAME, pol)
    ]
    os.makedirs(a.out, exist_ok=True)
    meta = {"tables": table_digests([a.fit_table, *tables])}
    journal = Journal(os.path.join(a.out, "shape_check_runs.jsonl"), meta, a.resume)
    if a.resume:
        print(journal.note, file=sys.stderr)
    results = run_tasks(_task, tasks, jobs=a.jobs, journal=journal, encode=list, decode=_decode,
                        label="shape check", what=lambda t: " ".join(map(str, t[:4])))  # fmt: skip
    journal.close()
    cells: dict[tuple[Any, ...], dict[str, float]] = {}
    info: dict[tuple[Any, ...], tuple[int, str]] = {}
    for t, (tok_s, switches, final) in zip(tasks, results, strict=True):
        key, name = t[:3], t[3]
        cells.setdefault(key, {})[name] = tok_s
        if name == pol:
            info[key] = (switches, final)
    worst: dict[tuple[str, float], tuple[float, int, float, int]] = {}
    print(f"fit {a.fit_table}, launch {a.launch}, {pol}, {a.iterations} iterations")
    print(
        "ratio: specfsm / best static grid state (the engine's PLAIN state included); "
        f"ratio_nd (info): the same with the no-draft server {NO_DRAFT_NAME} added"
    )
    print(f"{'score table':<34} {'alpha':>5} {'conc':>4} {'best static':<20} {'tok/s':>8} "
          f"{'specfsm':>8} {'ratio':>6} {'ratio_nd':>9} {'sw':>3} final")  # fmt: skip
    for key in sorted(cells):
        t, al, c = key
        name, best = best_static(cells[key])
        best_nd = max(best, cells[key][NO_DRAFT_NAME])
        mine = cells[key][pol]
        ratio, ratio_eng = mine / best, mine / best_nd
        sw, final = info[key]
        print(f"{t:<34} {al:>5} {c:>4} {name:<20} {best:>8.0f} {mine:>8.0f} {ratio:>6.3f} "
              f"{ratio_eng:>9.3f} {sw:>3} {final}")  # fmt: skip
        w = worst.get((t, al))
        if w is None:
            w = worst[(t, al)] = (ratio, c, ratio_eng, c)
        if ratio < w[0]:
            w = worst[(t, al)] = (ratio, c, w[2], w[3])
        if ratio_eng < w[2]:
            worst[(t, al)] = (w[0], w[1], ratio_eng, c)
    for (t, al), (ratio, c, ratio_eng, c_eng) in sorted(worst.items()):
        print(f"min ratio {t} alpha {al}: {ratio:.3f} (conc {c}); with the no-draft server "
              f"(info): {ratio_eng:.3f} (conc {c_eng})")  # fmt: skip
    return 0 if min(w[0] for w in worst.values()) >= 0.99 else 1


if __name__ == "__main__":
    sys.exit(main())
