#!/usr/bin/env python3
"""Turn the SGLang step-timing logs into a cost table and the greedy comparison into a match rate.

Inputs (from run_on_device.sh): ``timing_<spec>.jsonl`` (hook records and sweep marks) and
``greedy_<spec>.json`` for spec in none / chain / tree. For each sweep batch size N, the records
between N's ``begin`` and ``end`` marks with batch size N are kept and their median taken.

Output CSV (``model,bs,q,ctx,ms_per_step``, the cost-table format of specfsm.costs):

- ``llama8b`` q=1: plain decode step (spec none, stage decode);
- ``llama8b`` q=4 / q=16: verify of the chain (3 steps, topk 1, 4 tokens) / the tree (2 steps,
  topk 4, 16 tokens): EAGLEWorkerV2.verify, i.e. the target forward plus acceptance and KV moves;
- ``eagle3_draft8b`` q=1 / q=4: one draft forward (chain topk 1 / tree topk 4): the whole
  ``draft()`` of the iteration divided by its ``num_steps - 1`` forwards;
- ``eagle3_draft_extend8b`` q=4 / q=16: the draft-extend after the chain / tree verify;
- ``llama8b_verify_fwd`` q=4 / q=16: the target forward alone inside the verify.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

STEPS = {"chain": (3, 1, 4), "tree": (2, 4, 16)}  # num_steps, topk, num_draft_tokens


def load(path: Path) -> tuple[list[dict], list[dict]]:
    recs, marks = [], []
    if not path.exists():
        return recs, marks
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        (marks if "mark" in obj else recs).append(obj)
    return recs, marks


def per_bs(recs: list[dict], marks: list[dict], stage: str) -> dict[int, tuple[float, int]]:
    out: dict[int, tuple[float, int]] = {}
    begins = {m["bs"]: m["t"] for m in marks if m["mark"] == "begin"}
    ends = {m["bs"]: m["t"] for m in marks if m["mark"] == "end"}
    for n, t0 in begins.items():
        t1 = ends.get(n, float("inf"))
        ms = [r["ms"] for r in recs if r["stage"] == stage and r["bs"] == n and t0 <= r["t"] <= t1]
        if ms:
            out[n] = (statistics.median(ms), len(ms))
    return out


def greedy_match(outdir: Path) -> list[str]:
    lines = []
    base_p = outdir / "greedy_none.json"
    if not base_p.exists():
        return ["greedy: no baseline (spec none) output"]
    base = json.loads(base_p.read_text())["output_ids"]
    for spec in ("chain", "tree"):
        p = outdir / f"greedy_{spec}.json"
        if not p.exists():
            lines.append(f"greedy_match_{spec}: not run")
            continue
        other = json.loads(p.read_text())["output_ids"]
        tok = same = seq = 0
        first_div = []
        for a, b in zip(base, other, strict=False):
            tok += max(len(a), len(b))
            same += sum(1 for x, y in zip(a, b, strict=False) if x == y)
            seq += a == b
            div = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            first_div.append(div)
        lines.append(
            f"greedy_match_{spec}: {seq}/{len(base)} sequences identical, token match "
            f"{same}/{tok} = {same / max(tok, 1):.3f}; first divergence per prompt {first_div}"
        )
    distinct = len({t for seq in base for t in seq})
    lines.append(f"greedy baseline: {len(base)} prompts, {distinct} distinct output tokens")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="folder with timing_*/greedy_*")
    ap.add_argument("--csv", type=Path, required=True)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--header", action="append", default=[], help="extra '#' header lines")
    args = ap.parse_args(argv)

    rows: list[tuple[str, int, int, float]] = []
    notes: list[str] = []
    recs, marks = load(args.dir / "timing_none.jsonl")
    for n, (ms, k) in sorted(per_bs(recs, marks, "decode").items()):
        rows.append(("llama8b", n, 1, ms))
        notes.append(f"none decode bs={n} n={k} {ms:.3f} ms")
    for spec, (steps, topk, k_tok) in STEPS.items():
        recs, marks = load(args.dir / f"timing_{spec}.jsonl")
        for n, (ms, k) in sorted(per_bs(recs, marks, "verify").items()):
            rows.append(("llama8b", n, k_tok, ms))
            notes.append(f"{spec} verify bs={n} n={k} {ms:.3f} ms")
        for n, (ms, _k) in sorted(per_bs(recs, marks, "target_verify_fwd").items()):
            rows.append(("llama8b_verify_fwd", n, k_tok, ms))
        for n, (ms, k) in sorted(per_bs(recs, marks, "draft").items()):
            rows.append(("eagle3_draft8b", n, topk, ms / max(steps - 1, 1)))
            notes.append(f"{spec} draft() bs={n} n={k} {ms:.3f} ms for {steps - 1} forwards")
        for n, (ms, k) in sorted(per_bs(recs, marks, "draft_extend").items()):
            rows.append(("eagle3_draft_extend8b", n, k_tok, ms))
            notes.append(f"{spec} draft_extend bs={n} n={k} {ms:.3f} ms")

    order = ["llama8b", "llama8b_verify_fwd", "eagle3_draft8b", "eagle3_draft_extend8b"]
    rows.sort(key=lambda r: (order.index(r[0]), r[1], r[2]))
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w") as fh:
        for h in args.header:
            fh.write(f"# {h}\n")
        fh.write("model,bs,q,ctx,ms_per_step\n")
        for model, n, q, ms in rows:
            fh.write(f"{model},{n},{q},{args.ctx},{ms:.4f}\n")
    print("\n".join(notes))
    for line in greedy_match(args.dir):
        print(line)
    print(f"sglang_rows: {len(rows)} (goal >= 63: 9 bs x 7)")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
