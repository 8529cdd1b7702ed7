#!/usr/bin/env python3
"""The controlled-acceptance sweep measured on the H200 beside what the simulator predicts.

Reads an acceptance-suite results folder (``results_none.jsonl``: no speculation;
``results_agree_*.jsonl``: the EAGLE engines whose draft agrees at a known rate, each cell run
pinned SPECULATING, pinned PLAIN and under the threshold policy) and prices every cell with the
simulator's per-iteration cost model (``specfsm.model.costs.CostModel``, the code
``specfsm.sim.engine`` charges each iteration with) on the in-engine table, at the accept length
measured in that cell. A sweep cell is a closed batch of c requests decoding together, measured
end to end as (tokens of L2 - L1 new tokens) / (wall(L2) - wall(L1)), so prefill is excluded on
both sides.

Prints a table (markdown) and the ratios; ``--summary`` appends ``sim_vs_engine_*`` lines to a
``specfsm_summary.txt``. Caveat printed with the table: the in-engine table's draft rows are
EAGLE-3's (one fc over 3 target layers, attention over [embeds, hidden]); the sweep's draft is
EAGLE v1 (fc over [embeds, hidden], plain attention), so draft and draft-extend costs differ.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import CostModel, load_table


def rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--table", default="h200_sglang0517_llama8b")
    ap.add_argument("--low", type=int, default=24, help="the sweep's threshold policy: low")
    ap.add_argument("--summary", type=Path, default=None)
    ap.add_argument("--markdown", type=Path, default=None)
    args = ap.parse_args()

    model = CostModel(load_table(args.table), DraftShape.chain(3))
    nospec = {
        r["c"]: r["tok_s"] for r in rows(args.dir / "results_none.jsonl") if r["phase"] == "sweep"
    }
    out = [
        f"Measured on the H200 (SGLang 0.5.17, EAGLE v1 chain 3 steps, agree_weights) vs the "
        f"simulator's cost model on `{args.table}` (EAGLE-3 draft rows), tok/s.",
        "",
        "| engine | c | accept | nospec meas / sim | always-spec meas / sim "
        "| warm PLAIN meas / sim "
        "| specfsm meas / sim | worst sim/meas |",
        "| --- | ---: | ---: | --- | --- | --- | --- | ---: |",
    ]
    ratios: list[tuple[float, str]] = []
    for path in sorted(args.dir.glob("results_agree_*.jsonl")):
        tag = path.name[len("results_") : -len(".jsonl")]
        by_c: dict[int, dict[str, dict[str, Any]]] = {}
        for r in rows(path):
            if r["phase"] == "sweep":
                by_c.setdefault(r["c"], {})[r["variant"]] = r
        for c in sorted(by_c):
            v = by_c[c]
            acc = float(v["always_speculate"]["accept_length"] or 1.0)
            sim = {
                "nospec": model.plain_tps(c),
                "always_speculate": model.spec_tps(c, acc),
                "plain": model.off_tps(c, "warm"),
            }
            # the sweep runs pinned PLAIN right before the threshold policy: above `low` it stays
            sim["specfsm"] = sim["plain"] if c > args.low else sim["always_speculate"]
            meas = {k: float(v[k]["tok_s"]) for k in ("always_speculate", "plain", "specfsm")}
            if c in nospec:
                meas["nospec"] = float(nospec[c])
            cells = []
            worst = 1.0
            for k in ("nospec", "always_speculate", "plain", "specfsm"):
                if k not in meas:
                    cells.append("-")
                    continue
                ratio = sim[k] / meas[k]
                ratios.append((ratio, f"{tag} c{c} {k}"))
                worst = ratio if abs(ratio - 1) > abs(worst - 1) else worst
                cells.append(f"{meas[k]:.0f} / {sim[k]:.0f}")
            out.append(f"| {tag} | {c} | {acc:.2f} | " + " | ".join(cells) + f" | {worst:.2f} |")
    ratios.sort()
    lo, hi = ratios[0], ratios[-1]
    geo = 1.0
    for r, _ in ratios:
        geo *= r
    geo **= 1 / len(ratios)
    out += [
        "",
        f"sim/measured over {len(ratios)} cells: geomean {geo:.3f}, lowest {lo[0]:.3f} ({lo[1]}), "
        f"highest {hi[0]:.3f} ({hi[1]})",
    ]
    text = "\n".join(out)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.summary:
        with args.summary.open("a") as fh:
            fh.write(f"sim_vs_engine_cells: {len(ratios)} (sim tok/s / measured tok/s)\n")
            fh.write(f"sim_vs_engine_geomean: {geo:.3f}\n")
            fh.write(f"sim_vs_engine_lowest: {lo[0]:.3f} ({lo[1]})\n")
            fh.write(f"sim_vs_engine_highest: {hi[0]:.3f} ({hi[1]})\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
