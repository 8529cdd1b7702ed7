#!/usr/bin/env python3
"""The shapes phase measured on the H200 beside what the simulator predicts.

Reads a suite results folder (``results_<tag>.jsonl`` rows of ``phase == "shapes"``: every
static choice held on one engine, each shape by a one-target ShapeCycle and PLAIN pinned, then
the shape-choosing GoodputPolicy; closed batches of c requests, tok/s from the L2 - L1 wall
difference, prefill excluded) and prints, per tag and concurrency c:

* measured: tok/s of each static choice, the best one, specfsm, specfsm / best static;
* cost model: each static choice priced by ``CostModel`` on the in-engine table at the accept
  length MEASURED for it in that cell (what the simulator charges per iteration), the best one;
* simulator: ``specfsm.sim.engine.run`` at fixed concurrency c, per-token acceptance alpha
  fitted to the measured accept length of the launch shape in that cell, every static shape
  (``FixedController``) and the engine's PLAIN state held (``StaticController``), and specfsm
  (GoodputPolicy over the same shapes, through the FSM, zero-tax PLAIN), specfsm / best
  static. The simulator's requests have its default workload (prefill
  included), so its absolute tok/s are not the measured ones: compare the ratios and the best
  shape.

Caveat, printed with the table: the in-engine table's draft rows are EAGLE-3's, the engine's
draft here is EAGLE v1 (agree_weights.py), so draft costs differ. ``--markdown`` writes the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specfsm.model.acceptance import alpha_from_accept_length, parse_shape, shape_text
from specfsm.model.costs import CostModel, load_table
from specfsm.policy.goodput import GoodputPolicy
from specfsm.sim.baselines import PLAIN_STATE_NAME, StaticController
from specfsm.sim.engine import run
from specfsm.sim.peers import FixedController, FSMController
from specfsm.sim.traces import fixed_concurrency


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument(
        "--table",
        default="h200_sglang0517_llama8b",
        help='a cost table, or "table+profile.csv" (the engine\'s start-up profile laid over it)',
    )
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args()
    table = load_table(args.table)
    out = [
        f"H200 (SGLang 0.5.17, EAGLE v1 drafts agreeing at `mid`, agree_weights.py) vs the cost "
        f"model and the simulator on `{args.table}` (EAGLE-3 draft rows: draft costs differ).",
        "",
        "| tag | c | measured: best static (tok/s) | specfsm | specfsm / best | cost model at "
        "measured accept: best static | simulator: best static | simulator: specfsm / best |",
        "| --- | ---: | --- | ---: | ---: | --- | --- | ---: |",
    ]
    for path in sorted(args.dir.glob("results_*.jsonl")):
        sh = [r for r in rows(path) if r.get("phase") == "shapes"]
        if not sh:
            continue
        tag = path.name[len("results_") : -len(".jsonl")]
        for c in sorted({r["c"] for r in sh}):
            cell = {r["variant"]: r for r in sh if r["c"] == c}
            statics = {k[7:]: v for k, v in cell.items() if k.startswith("static_")}
            best_m = max(statics, key=lambda k: statics[k]["tok_s"])
            sf = cell.get("specfsm", {}).get("tok_s", 0.0)
            shapes = [parse_shape(k) for k in statics if k != "PLAIN"]
            launch = shapes[0]
            priced: dict[str, float] = {}
            for k, v in statics.items():
                m = CostModel(table, launch)
                if k == "PLAIN":
                    priced[k] = 1000.0 * c / m.zero_tax_ms(c)
                elif v.get("accept_length"):
                    s = parse_shape(k)
                    priced[k] = 1000.0 * c * float(v["accept_length"]) / m.spec_ms(c, s)
            best_p = max(priced, key=lambda k: priced[k])
            acc = statics[shape_text(launch)].get("accept_length") or 1.0
            alpha = alpha_from_accept_length(float(acc), launch)
            cost = CostModel(table, launch)

            def tok_s(ctl: Any, c: int = c, alpha: float = alpha, cost: CostModel = cost) -> float:
                r = run(
                    ctl,
                    fixed_concurrency(c),
                    cost,
                    alpha,
                    iterations=args.iterations,
                    warmup_iterations=300,
                )
                return r.tok_s

            sim = {s.label(): tok_s(FixedController(True, s)) for s in shapes}
            # the engine's PLAIN state held (zero-tax steps, draft prefilled), as measured above
            sim["PLAIN"] = tok_s(StaticController(PLAIN_STATE_NAME, None))
            pol = GoodputPolicy(cost, float(acc), shapes=shapes)
            specfsm_tok_s = tok_s(FSMController("specfsm", pol, launch))
            best_s = max(sim, key=lambda k: sim[k])
            out.append(
                f"| {tag} | {c} | {best_m} ({statics[best_m]['tok_s']:.0f}) | {sf:.0f} | "
                f"{sf / statics[best_m]['tok_s']:.3f} | {best_p} ({priced[best_p]:.0f}) | "
                f"{best_s} ({sim[best_s]:.0f}) | {specfsm_tok_s / sim[best_s]:.3f} |"
            )
    text = "\n".join(out)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
