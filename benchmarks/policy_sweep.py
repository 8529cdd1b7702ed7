#!/usr/bin/env python3
"""Policy sweep (issue 4, "Done when"): every policy side by side in one run, simulated.

Policies are FITTED on one step-cost table (--fit-table) and SCORED on another (--score-table):
a policy scored by the very cost model it optimises cannot lose. Scenarios: EAGLE-3 chain of 3
steps and the seeds' tree (topk 4, 2 steps, 16 draft tokens), alpha 0.6 and 0.8.

(a) fixed concurrency 1..256: specfsm tok/s vs the best static choice (no-spec or always-spec)
    and vs each peer rule (SGLang 0.5.23 adaptive, vLLM-style bs table, TensorRT-LLM
    max_concurrency), per level.
(b) time-varying closed-loop load (ramp 1->256->1, bursts 2/128, sinusoid 2..200), each at
    least 20,000 iterations: throughput and mean TPOT vs the static choice with the higher
    throughput on that trace, and switches per 100 iterations.

"specfsm" in the goals is GoodputPolicy (specfsm-goodput); ThresholdPolicy is printed too.
Ends with one summary line per goal: `name: value (goal ...)`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from typing import Any

from specfsm.acceptance import DraftShape, accept_length
from specfsm.costs import SHARED_REF, CostModel, load_table, packaged_tables
from specfsm.policy_cli import (
    PEER_NAMES,
    STATIC_NAMES,
    Progress,
    format_table,
    lineup,
    plot_throughput,
    plot_timeline,
    recommend,
    traces,
    write_csv,
)
from specfsm.sim import fixed_concurrency, run

LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SHAPES = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}
ALPHAS = (0.6, 0.8)
MAIN = "specfsm-goodput"


def default_score_table(fit: str) -> str:
    """A measured table other than the fit table, preferring a different context length."""
    have = packaged_tables()
    for cand in ("h200_llama8b_ctx4096", "h200_sglang0517_llama8b", "h200_llama8b_ctx1024"):
        if cand in have and cand != fit:
            return cand
    return fit


def _task(args: tuple[Any, ...]) -> tuple[tuple[str, float, str], str, dict[str, Any], Any]:
    (
        shape_name,
        alpha,
        load_kind,
        load_arg,
        pol_name,
        fit_name,
        score_name,
        duration,
        iters,
        warm,
        seed,
        lazy,
        record,
    ) = args
    shape = SHAPES[shape_name]
    fit = CostModel(load_table(fit_name), shape)
    score = CostModel(load_table(score_name), shape)
    ctl = next(c for c in lineup(fit, shape, alpha) if c.name == pol_name)
    if load_kind == "conc":
        load = fixed_concurrency(int(load_arg))
        r = run(
            ctl,
            load,
            score,
            alpha,
            seed=seed,
            iterations=iters + warm,
            warmup_iterations=warm,
            lazy_draft_prefill=lazy,
        )
    else:
        load = next(t for t in traces(duration) if t.name == load_arg)
        r = run(ctl, load, score, alpha, seed=seed, record_timeline=record, lazy_draft_prefill=lazy)
    row = r.row()
    tl = r.timeline[::4] if r.timeline else None
    return (shape_name, alpha, load.name), pol_name, row, tl


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fit-table", default=SHARED_REF, help=f"one of {packaged_tables()} or a path")
    ap.add_argument("--score-table", default=None, help="default: a measured table != fit table")
    ap.add_argument("--duration", type=float, default=500.0, help="trace length (simulated s)")
    ap.add_argument("--iterations", type=int, default=4000, help="measured iterations per level")
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--lazy-draft-prefill",
        action="store_true",
        help="in PLAIN, prefill without the draft (prompt becomes lag); "
        "default: SGLang 0.5.23 behaviour (draft prefilled always)",
    )
    ap.add_argument("--out", default="out/policy_sweep")
    ap.add_argument("--quick", action="store_true", help="smoke test: short traces, few iterations")
    a = ap.parse_args(argv)
    if a.quick:
        a.duration, a.iterations, a.warmup = 40.0, 600, 200
    score_name = a.score_table or default_score_table(a.fit_table)
    same = score_name == a.fit_table
    os.makedirs(a.out, exist_ok=True)
    print(
        f"fit table: {a.fit_table}   score table: {score_name}"
        + (
            "   WARNING: same table (no second measured table yet): not out-of-sample"
            if same
            else ""
        )
    )
    print(f"lazy draft prefill: {a.lazy_draft_prefill}; seed {a.seed}; traces {a.duration:g} s")
    pol_names = [c.name for c in lineup(CostModel(load_table(a.fit_table)), SHAPES["chain3"], 0.8)]
    trace_names = [t.name for t in traces(a.duration)]
    tasks = []
    for sn in SHAPES:
        for al in ALPHAS:
            fit = CostModel(load_table(a.fit_table), SHAPES[sn])
            rec = recommend(fit, accept_length(al, SHAPES[sn]))
            print(
                f"  {sn} alpha {al}: accept_len {rec.accept_len:.3f}, fit crossover bs "
                f"{rec.crossover_bs}, Threshold(high={rec.threshold_high}, low={rec.threshold_low})"
            )
            for p in pol_names:
                for c in LEVELS:
                    tasks.append(
                        (
                            sn,
                            al,
                            "conc",
                            c,
                            p,
                            a.fit_table,
                            score_name,
                            a.duration,
                            a.iterations,
                            a.warmup,
                            a.seed,
                            a.lazy_draft_prefill,
                            False,
                        )
                    )
                for tn in trace_names:
                    rec_tl = tn.startswith("bursts") and p in (
                        MAIN,
                        "sglang-adaptive",
                        "vllm-bs-table",
                    )
                    tasks.append(
                        (
                            sn,
                            al,
                            "trace",
                            tn,
                            p,
                            a.fit_table,
                            score_name,
                            a.duration,
                            0,
                            0,
                            a.seed,
                            a.lazy_draft_prefill,
                            rec_tl,
                        )
                    )
    tasks.sort(key=lambda t: t[2] != "trace")  # long ones first
    t0 = time.monotonic()
    prog = Progress(len(tasks), "sweep")
    res: dict[tuple[str, float, str], dict[str, dict[str, Any]]] = {}
    tls: dict[tuple[str, float, str], dict[str, Any]] = {}
    ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
    with ctx.Pool(max(1, a.jobs)) as pool:
        for key, pol, row, tl in pool.imap_unordered(_task, tasks, chunksize=1):
            res.setdefault(key, {})[pol] = row
            if tl is not None:
                tls.setdefault(key, {})[pol] = tl
            prog.tick(f"{key[0]} {key[1]} {key[2]} {pol}")
    wall = time.monotonic() - t0

    all_rows: list[dict[str, Any]] = []
    a_static: list[float] = []
    a_peer: list[float] = []
    a_thr_static: list[float] = []
    b_tput: list[float] = []
    b_tpot: list[float] = []
    b_tpot_tw: list[float] = []
    b_sw: list[float] = []
    b_iters: list[int] = []
    b_peer: list[float] = []
    for sn in SHAPES:
        for al in ALPHAS:
            print(f"\n######## {sn} ({SHAPES[sn].label()}), alpha {al}")
            tput: dict[str, list[float]] = {}
            print(
                f"{'level':>6} {'best static':>12} {MAIN:>16} {'/static':>8} {'/best peer':>10} "
                f"{'/sglang':>8} {'/vllm':>8} {'/trtllm':>8} {'threshold/static':>16}"
            )
            for c in LEVELS:
                rows = res[(sn, al, f"conc{c}")]
                for p, r in rows.items():
                    tput.setdefault(p, []).append(float(r["tok_s"]))
                    all_rows.append({"shape": sn, "alpha": al, **r})
                best_static = max(float(rows[s]["tok_s"]) for s in STATIC_NAMES)
                me = float(rows[MAIN]["tok_s"])
                peers = {p: float(rows[p]["tok_s"]) for p in PEER_NAMES}
                rs, rp = me / best_static, me / max(peers.values())
                rthr = float(rows["specfsm-threshold"]["tok_s"]) / best_static
                a_static.append(rs)
                a_peer.append(rp)
                a_thr_static.append(rthr)
                print(
                    f"{c:>6} {best_static:>12.0f} {me:>16.0f} {rs:>8.3f} {rp:>10.3f} "
                    f"{me / peers['sglang-adaptive']:>8.3f} {me / peers['vllm-bs-table']:>8.3f} "
                    f"{me / peers['trtllm-max-conc']:>8.3f} {rthr:>16.3f}"
                )
            plot_throughput(
                os.path.join(a.out, f"throughput_{sn}_a{al}.png"),
                list(LEVELS),
                tput,
                f"{SHAPES[sn].label()}, alpha {al}: fit {a.fit_table}, score {score_name}",
            )
            for tn in trace_names:
                key = (sn, al, tn)
                rows = res[key]
                for r in rows.values():
                    all_rows.append({"shape": sn, "alpha": al, **r})
                print(f"\n-- trace {tn}")
                print(format_table(list(rows.values())))
                best = max(STATIC_NAMES, key=lambda s: float(rows[s]["tok_s"]))
                me = rows[MAIN]
                rt = float(me["tok_s"]) / float(rows[best]["tok_s"])
                rtp = float(me["tpot_mean_ms"]) / float(rows[best]["tpot_mean_ms"])
                rtw = float(me["tpot_time_weighted_ms"]) / float(
                    rows[best]["tpot_time_weighted_ms"]
                )
                bp = max(PEER_NAMES, key=lambda s: float(rows[s]["tok_s"]))
                rpe = float(me["tok_s"]) / float(rows[bp]["tok_s"])
                b_tput.append(rt)
                b_tpot.append(rtp)
                b_tpot_tw.append(rtw)
                b_sw.append(float(me["switches_per_100"]))
                b_iters.append(int(me["iterations"]))
                b_peer.append(rpe)
                print(
                    f"   {MAIN} / best static ({best}): tok/s {rt:.3f}, mean TPOT {rtp:.3f}, "
                    f"time-weighted TPOT {rtw:.3f}; switches/100 it {me['switches_per_100']}; "
                    f"iterations {me['iterations']}; / best peer ({bp}) tok/s {rpe:.3f}, "
                    f"TPOT {float(me['tpot_mean_ms']) / float(rows[bp]['tpot_mean_ms']):.3f}"
                )
                if key in tls:
                    from specfsm.sim import RunResult

                    rr = [
                        RunResult(
                            p,
                            tn,
                            0,
                            0,
                            0,
                            0,
                            [],
                            [],
                            int(
                                float(rows[p]["switches_per_100"])
                                * int(rows[p]["iterations"])
                                / 100
                                + 0.5
                            ),
                            {},
                            tls[key][p],
                        )
                        for p in (MAIN, "sglang-adaptive", "vllm-bs-table")
                        if p in tls[key]
                    ]
                    plot_timeline(
                        os.path.join(a.out, f"timeline_bursts_{sn}_a{al}.png"),
                        rr,
                        f"bursts 2/128, {SHAPES[sn].label()}, alpha {al}",
                    )
    write_csv(os.path.join(a.out, "policy_sweep.csv"), all_rows)
    with open(os.path.join(a.out, "policy_sweep.json"), "w", encoding="utf-8") as f:
        json.dump({"fit": a.fit_table, "score": score_name, "rows": all_rows}, f)
    print(f"\nwall {wall:.0f} s, {len(tasks)} runs; wrote {a.out}/")
    print(f"scored_on_unfitted_table: {'no' if same else 'yes'} (goal yes)")
    print(f"a_min_ratio_vs_best_static: {min(a_static):.3f} (goal >= 0.99)")
    print(f"a_min_ratio_vs_best_peer: {min(a_peer):.3f} (goal >= 1.00)")
    print(f"a_threshold_min_ratio_vs_best_static: {min(a_thr_static):.3f} (info)")
    print(f"b_min_tput_ratio_vs_best_static: {min(b_tput):.3f} (goal >= 0.99)")
    print(f"b_max_mean_tpot_ratio_vs_best_static: {max(b_tpot):.3f} (goal <= 0.90)")
    print(f"b_max_time_weighted_tpot_ratio_vs_best_static: {max(b_tpot_tw):.3f} (info)")
    print(f"b_max_switches_per_100_iterations: {max(b_sw):.3f} (goal <= 1)")
    print(f"b_min_iterations: {min(b_iters)} (goal >= 20000)")
    print(f"b_min_tput_ratio_vs_best_peer: {min(b_peer):.3f} (info)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
