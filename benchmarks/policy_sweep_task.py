"""One simulated run of benchmarks/policy_sweep.py from its task tuple (what the sweep's
worker processes call), and what the sweep shares with it: the launch shapes, the specfsm
variants, the tables' labels and trace lengths.

A task is ``(score table, alpha, load kind "conc" | "trace", level | trace name, shape key
("-": a shape-free controller, run at chain3), policy, fit table, trace duration (s),
iterations, warm-up iterations, seed, deferred draft prefill while PLAIN, record the
timeline)``. With the deferral on (the adapter's ``defer_prefill_tokens``, its default) the
engine's PLAIN state and specfsm's zero-tax PLAIN prefill by the target alone and count the
prompt as lag for the catch-up.
"""

from __future__ import annotations

from typing import Any

from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import CostModel, load_table, table_stem
from specfsm.sim.baselines import PLAIN_STATE_NAME, controller
from specfsm.sim.engine import RunResult, run
from specfsm.sim.oracle import default_phase_s
from specfsm.sim.peers import WARM_NAME, ZERO_TAX_NAME, Controller, lineup
from specfsm.sim.traces import fixed_concurrency, named_traces

SHAPES = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}
SPECFSM = (ZERO_TAX_NAME, WARM_NAME)


def label(table: str) -> str:
    """The table's name, marked when it is synthetic (everywhere it is printed)."""
    synthetic = table_stem(table).startswith("synthetic")
    return f"{table} (SYNTHETIC, not measured)" if synthetic else table


def trace_scale(fit: CostModel, table: str) -> float:
    """How much longer (simulated s) traces run on `table` than on the fit table: its decode
    step at bs 64 / the fit table's, at least 1 (so a slower model gets as many iterations)."""
    return max(1.0, CostModel(load_table(table)).plain_ms(64) / fit.plain_ms(64))


def _controller(
    name: str, fit: CostModel, shape: DraftShape, alpha: float, lazy: bool
) -> Controller:
    if name in SPECFSM:
        return lineup(fit, shape, alpha, names=[name], zero_tax_lazy_prefill=lazy)[0]
    ctl = controller(name, fit, shape, alpha)
    if name == PLAIN_STATE_NAME:
        ctl.lazy_draft_prefill = lazy  # the engine pinned in PLAIN defers it as specfsm does
    return ctl


def run_task(args: tuple[Any, ...]) -> RunResult:
    (table, alpha, load_kind, load_arg, sn, pol, fit_name, duration, iters, warm, seed, lazy,
     record) = args  # fmt: skip
    shape = SHAPES["chain3" if sn == "-" else sn]
    fit = CostModel(load_table(fit_name), shape)
    score = CostModel(load_table(table), shape)
    ctl = _controller(pol, fit, shape, alpha, lazy)
    if load_kind == "conc":
        r = run(ctl, fixed_concurrency(int(load_arg)), score, alpha, seed=seed,
                iterations=iters + warm, warmup_iterations=warm)  # fmt: skip
    else:
        load = named_traces(duration)[load_arg]
        r = run(ctl, load, score, alpha, seed=seed, record_timeline=record,
                phase_s=default_phase_s(duration))  # fmt: skip
        if r.timeline:
            r.timeline = r.timeline[::4]
    return r


def describe(t: tuple[Any, ...]) -> str:
    """A task, for the progress bar: table, alpha, load, shape key, policy and seed."""
    return " ".join(map(str, (*t[:2], *t[3:6]))) + f" seed {t[10]}"
