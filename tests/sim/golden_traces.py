"""Golden decision traces of the simulator: every transition specfsm's machine takes, with its
reason, over a fixed grid (fixed seed), so that a change meant to keep behaviour keeps it
exactly.

The grid: cost tables (the in-engine H200 table, its Triton re-run, its ctx-4096 run, the
synthetic 32B-shaped table, and the two-context table priced per iteration at the batch's
mean context) x launch shapes chain3 and tree (4,2,16) x alpha 0.6 / 0.8, each cell served by
the goodput policy choosing among the shapes (zero-tax and warm PLAIN), the goodput policy
switching the launch shape on and off (no shapes), the threshold policy, and the goodput policy
built by the registry from its JSON description; closed-loop concurrency levels and the ramp
trace 1 -> 256 -> 1. The policies are fitted on the in-engine table, as `policy_sweep.py`
fits them, except in the two-context cell (fitted on the table it is scored on).

One JSON line per transition (case, it, src, dst, event, shape, reason) and one per case with
its result (iterations, tokens, switches: what the decisions produced). Regenerate only when a
change of behaviour is meant, and say why in its commit:

    .venv/bin/python tests/sim/golden_traces.py --write
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specfsm.model.acceptance import DraftShape, accept_length
from specfsm.model.costs import CostModel, load_table
from specfsm.policy.registry import make_policy
from specfsm.sim.engine import run
from specfsm.sim.peers import (
    THRESHOLD_ZERO_TAX_NAME,
    WARM_NAME,
    ZERO_TAX_NAME,
    FSMController,
    lineup,
)
from specfsm.sim.traces import Workload, fixed_concurrency, ramp

FIXTURE = Path(__file__).resolve().parent / "golden" / "sim_transitions.jsonl"

FIT = "h200_sglang0517_llama8b"
CTX2 = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"
#: (label, score table, fit table)
TABLES = (
    ("base", FIT, FIT),
    ("triton", "h200_sglang0517_llama8b_triton", FIT),
    ("ctx4096", "h200_sglang0517_llama8b_ctx4096", FIT),
    ("32b", "synthetic_32b_shaped", FIT),
    ("ctx2", CTX2, CTX2),
)
SHAPES = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}
ALPHAS = (0.6, 0.8)
LEVELS = (1, 16, 128)
ITERATIONS = 400
RAMP_S = 24.0
SEED = 0
#: prompts of 512..3584 tokens: the two-context cell's mean context moves across its buckets
CTX_WORKLOAD = Workload(prompt_len=(512, 3584))


def _controllers(fit: CostModel, shape: DraftShape, alpha: float, table: str) -> list[Any]:
    """The specfsm controllers of one cell (see the module docstring)."""
    out: list[Any] = lineup(
        fit, shape, alpha, names=[ZERO_TAX_NAME, WARM_NAME, THRESHOLD_ZERO_TAX_NAME]
    )
    onoff = lineup(fit, shape, alpha, names=[ZERO_TAX_NAME], shapes=())[0]
    onoff.name = "goodput-onoff"
    out.append(onoff)
    spec = {
        "name": "goodput",
        "table": table,
        "shape": [shape.topk, shape.steps, shape.draft_tokens],
        "accept_len": accept_length(alpha, shape),
        "shapes": "chain1,chain3,chain5,4,2,16",
        "shape_dwell": 64,
        # re-probe from PLAIN however much was measured: the re-probe rules' paths
        "reprobe_evidence": 10**6,
        "reprobe_after": 32,
    }
    out.append(FSMController("registry-goodput", make_policy(spec), shape))
    return out


def cases() -> Iterator[tuple[str, Any]]:
    """(case name, a thunk returning (controller, load, score cost, alpha, workload, iterations))
    over the grid, in a fixed order."""
    for label, score, fit_name in TABLES:
        for sn, shape in SHAPES.items():
            fit = CostModel(load_table(fit_name), shape)
            cost = CostModel(load_table(score), shape)
            wl = CTX_WORKLOAD if label == "ctx2" else None
            for alpha in ALPHAS:
                names = [c.name for c in _controllers(fit, shape, alpha, fit_name)]
                for i, name in enumerate(names):
                    for c in LEVELS:
                        yield (
                            f"{label}/{sn}/a{alpha}/{name}/c{c}",
                            (fit, shape, alpha, fit_name, i, fixed_concurrency(c), cost, wl),
                        )
                    yield (
                        f"{label}/{sn}/a{alpha}/{name}/ramp",
                        (fit, shape, alpha, fit_name, i, ramp(1, 256, RAMP_S), cost, wl),
                    )


def trace(name: str, spec: Any) -> list[dict[str, Any]]:
    """Run one case; its transition lines and its result line."""
    fit, shape, alpha, fit_name, i, load, cost, wl = spec
    ctl = _controllers(fit, shape, alpha, fit_name)[i]
    lines: list[dict[str, Any]] = []

    def record(rec: Any) -> None:
        lines.append(
            {
                "case": name,
                "it": rec.iteration,
                "src": rec.src.name,
                "dst": rec.dst.name,
                "event": rec.event.name,
                "shape": rec.shape.label() if rec.shape is not None else None,
                "reason": rec.reason,
            }
        )

    ctl.machine.listeners.append(record)
    iterations = None if load.duration_s is not None else ITERATIONS
    r = run(ctl, load, cost, alpha, workload=wl, seed=SEED, iterations=iterations)
    lines.append(
        {
            "case": name,
            "result": {
                "iterations": r.iterations,
                "output_tokens": r.output_tokens,
                "switches": r.switches,
                "transitions": ctl.machine.transitions,
            },
        }
    )
    return lines


def generate() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name, spec in cases():
        out.extend(trace(name, spec))
    return out


def read_fixture() -> list[dict[str, Any]]:
    with FIXTURE.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the fixture (else compare)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    got = generate()
    dt = time.perf_counter() - t0
    if a.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        with FIXTURE.open("w") as f:
            for line in got:
                f.write(json.dumps(line, sort_keys=True) + "\n")
        print(f"wrote {len(got)} lines to {FIXTURE} ({dt:.1f} s)")
        return 0
    want = read_fixture()
    diff = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), None)
    if diff is None and len(got) == len(want):
        print(f"{len(got)} lines identical ({dt:.1f} s)")
        return 0
    i = diff if diff is not None else min(len(got), len(want))
    print(f"first difference at line {i + 1}:\n  want {want[i : i + 1]}\n  got  {got[i : i + 1]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
