"""`specfsm tune` and `specfsm sim`, plus the shared pieces the policy sweep uses.

tune_main(argv) -> int: crossover bs, recommended ThresholdPolicy / GoodputPolicy parameters,
and the equivalent SGLang `--speculative-adaptive-config` JSON, from a cost table and an accept
length (or alpha, or a recorded specfsm transition/observation log).

sim_main(argv) -> int: every policy side by side on one load (fixed concurrency levels or a
time-varying trace), per-load tables, CSV/JSON and PNG plots into --out (default out/).
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from specfsm.acceptance import DraftShape, accept_length, alpha_from_accept_length
from specfsm.cli import (
    ArgParser,
    UsageError,
    accept_len,
    nonnegative_int,
    positive_float,
    positive_float_list,
    positive_int,
    positive_int_list,
    probability,
    require_extra,
)
from specfsm.costs import (
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    SHARED_REF,
    CostModel,
    load_table,
    packaged_tables,
)
from specfsm.goodput import GoodputPolicy
from specfsm.policies import ThresholdPolicy
from specfsm.sim import (
    BatchTableController,
    Controller,
    FixedController,
    FSMController,
    Load,
    MaxConcurrencyController,
    RunResult,
    SGLangAdaptiveController,
    bursts,
    fixed_concurrency,
    ramp,
    sglang_spec_cuda_graph_bs,
    sinusoid,
)

SHAPES = {"chain3": DraftShape.chain(3), "tree": DraftShape(4, 2, 16)}


def parse_shape(text: str) -> DraftShape:
    """chain3 | tree | chainN | topk,steps,tokens (argparse.ArgumentTypeError otherwise)."""
    if text in SHAPES:
        return SHAPES[text]
    try:
        if text.startswith("chain") and text[5:].isdigit():
            return DraftShape.chain(int(text[5:]))
        parts = [int(x) for x in text.split(",")]
        if len(parts) == 3:
            return DraftShape(*parts)
    except ValueError as exc:  # not integers, or DraftShape refused them
        if isinstance(exc.args[0] if exc.args else None, str) and "DraftShape" in exc.args[0]:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    raise argparse.ArgumentTypeError(
        f"{text!r} is not a draft shape: chain3, tree, chainN or topk,steps,tokens"
    )


# ------------------------------------------------------------------------------ tuning
@attrs.frozen
class Recommendation:
    plain: str
    crossover_bs: int | None
    accept_len: float
    threshold_high: int
    threshold_low: int
    debounce: int
    min_dwell: int
    sglang_config: dict[str, Any]

    def threshold_policy(self) -> ThresholdPolicy:
        return ThresholdPolicy(
            self.threshold_high, self.threshold_low, self.debounce, self.min_dwell
        )


def recommend(
    cost: CostModel,
    accept_len: float,
    *,
    low_margin: float = 0.05,
    debounce: int = 4,
    min_dwell: int = 32,
    max_bs: int = 1024,
    plain: str = PLAIN_ZERO_TAX,
) -> Recommendation:
    """Crossover and ThresholdPolicy(high, low) from the cost model.

    `plain` is what not speculating costs: "zero-tax" (a plain decode) or "warm" (plain decode
    + a 1-token draft-extend: SGLang steps=0, vLLM K=0, specfsm's PLAIN as the SGLang adapter
    ships it). high = crossover - 1 (the largest bs at which speculation still wins); low = the
    largest bs at which speculation wins by at least `low_margin` (so resuming is clearly worth
    it), capped below high. The SGLang-equivalent config always uses the warm crossover (its
    steps=0 is warm).
    """
    x = cost.crossover_bs(accept_len, max_bs, plain)
    high = (x - 1) if x is not None else max_bs
    high = max(high, 1)
    low = 0
    for bs in range(1, high + 1):
        if cost.spec_tps(bs, accept_len) >= cost.off_tps(bs, plain) * (1 + low_margin):
            low = bs
    low = min(low, high - 1)
    xw = x if plain == PLAIN_WARM else cost.crossover_bs(accept_len, max_bs, PLAIN_WARM)
    high_w = max((xw - 1) if xw is not None else max_bs, 1)
    return Recommendation(
        plain,
        x,
        accept_len,
        high,
        max(low, 0),
        debounce,
        min_dwell,
        sglang_equivalent(cost.shape, high_w),
    )


def sglang_equivalent(shape: DraftShape, high: int) -> dict[str, Any]:
    """An SGLang 0.5.23 adaptive config that speculates at bs <= high and runs steps=0 above.

    SGLang pads bs to a CUDA-graph bs and picks the largest slot key <= that, so the steps=0
    slot key is the first graph bs above pad(high). Note steps=0 still pays a draft-extend.
    """
    graph = sglang_spec_cuda_graph_bs(max(512, high + 1))
    i = bisect.bisect_left(graph, high)
    padded = graph[i] if i < len(graph) else high
    key = next((g for g in graph if g > padded), padded + 1)
    return {
        "ema_alpha": 0.2,
        "warmup_batches": 10,
        "update_interval": 5,
        "1": {"candidate_steps": [shape.steps]},
        str(key): {"candidate_steps": [0]},
    }


def _accept_from_log(path: str) -> float | None:
    vals: list[float] = []
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 (closed by the with below)
    except OSError as exc:
        raise UsageError(f"--log {path}: cannot read: {exc.strerror}") from None
    with f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            lens = rec.get("accept_lens") if isinstance(rec, dict) else None
            if (
                isinstance(lens, list)
                and lens
                and rec.get("mode", "SPECULATING") in ("SPECULATING", "Mode.SPECULATING")
            ):
                vals.append(sum(lens) / len(lens))
    return sum(vals) / len(vals) if vals else None


def check_accept_len(value: float | None, shape: DraftShape) -> None:
    """UsageError unless `value` (>= 1 already) is at most what `shape` can accept."""
    top = shape.steps + 1
    if value is not None and value > top:
        raise UsageError(
            f"argument --accept-len: {value:g} is more than {shape.label()} can accept "
            f"(at most steps + 1 = {top})"
        )


def cost_model(flag: str, table: str, shape: DraftShape, ctx: int | None) -> CostModel:
    """The cost model of `table`, or UsageError naming `flag`, the table and what is wrong."""
    try:
        return CostModel(load_table(table), shape, ctx=ctx)
    except (OSError, ValueError) as exc:
        why = str(exc.strerror if isinstance(exc, OSError) and exc.filename else exc)
        # the message names the table already (load_table, parse_table, check_models)
        raise UsageError(f"{flag}: {why}" if table in why else f"{flag} {table}: {why}") from None


def tune_main(argv: list[str] | None = None) -> int:
    ap = ArgParser(prog="specfsm tune", description=__doc__)
    ap.add_argument("--table", default=SHARED_REF, help=f"path or one of {packaged_tables()}")
    ap.add_argument(
        "--ctx", type=positive_int, default=None, help="context length (default: the table's first)"
    )
    ap.add_argument(
        "--shape",
        type=parse_shape,
        default=SHAPES["chain3"],
        help="chain3 | tree | chainN | topk,steps,tokens",
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--accept-len", type=accept_len, help="mean tokens per verify incl. bonus")
    g.add_argument("--alpha", type=probability, help="per-token acceptance rate, in [0, 1]")
    g.add_argument("--log", help="specfsm JSON-lines log with accept_lens fields")
    ap.add_argument(
        "--plain",
        choices=[PLAIN_WARM, PLAIN_ZERO_TAX],
        default=PLAIN_WARM,
        help="what specfsm's PLAIN costs: warm (the SGLang adapter as shipped: 1-token "
        "draft-extend every step) or zero-tax (the design target); default warm",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args(argv)
    check_accept_len(a.accept_len, a.shape)
    cost = cost_model("--table", a.table, a.shape, a.ctx)
    if a.log:
        acc = _accept_from_log(a.log)
        if acc is None:
            raise UsageError(f"--log {a.log}: no accept_lens found (a specfsm observation log?)")
    elif a.accept_len is not None:
        acc = a.accept_len
    else:
        acc = accept_length(a.alpha if a.alpha is not None else 0.7, a.shape)
    rec = recommend(cost, acc, plain=a.plain)
    other = PLAIN_ZERO_TAX if a.plain == PLAIN_WARM else PLAIN_WARM
    x_other = cost.crossover_bs(acc, 1024, other)
    out = {
        "table": cost.table.source,
        "ctx": cost.ctx,
        "shape": a.shape.label(),
        "accept_len": round(acc, 4),
        "alpha_equiv": round(alpha_from_accept_length(acc, a.shape), 4),
        "plain": a.plain,
        "crossover_bs": rec.crossover_bs,
        f"crossover_bs_{other.replace('-', '_')}": x_other,
        "threshold_policy": {
            "high": rec.threshold_high,
            "low": rec.threshold_low,
            "debounce": rec.debounce,
            "min_dwell": rec.min_dwell,
        },
        "goodput_policy": {
            "accept_len": round(acc, 4),
            "margin": 0.02,
            "debounce": 4,
            "min_dwell": 32,
            "plain": a.plain,
        },
        "sglang_adaptive_config": rec.sglang_config,
    }
    if a.json:
        print(json.dumps(out))
        return 0
    print(
        f"table {out['table']} ctx={cost.ctx} shape={out['shape']} accept_len={acc:.3f} "
        f"(alpha~{out['alpha_equiv']})"
    )
    print(
        f"{'bs':>5} {'plain tok/s':>12} {'warm tok/s':>11} {'spec tok/s':>12} "
        f"{'spec/plain':>10} {'spec/warm':>9}"
    )
    for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        p, w, s = cost.plain_tps(bs), cost.off_tps(bs, PLAIN_WARM), cost.spec_tps(bs, acc)
        print(f"{bs:>5} {p:>12.0f} {w:>11.0f} {s:>12.0f} {s / p:>10.2f} {s / w:>9.2f}")

    def _x(v: int | None) -> str:
        return str(v) if v is not None else "> 1024 (speculation always wins)"

    print(f"crossover bs ({a.plain} PLAIN): {_x(rec.crossover_bs)}")
    print(f"crossover bs ({other} PLAIN): {_x(x_other)}")
    print(
        f"ThresholdPolicy(high={rec.threshold_high}, low={rec.threshold_low}, "
        f"debounce={rec.debounce}, min_dwell={rec.min_dwell})"
    )
    print(
        f"GoodputPolicy(cost, accept_len={acc:.3f}, margin=0.02, debounce=4, min_dwell=32, "
        f"plain={a.plain!r})"
    )
    if a.shape.topk != 1:
        print(
            "note: SGLang 0.5.23 rejects --speculative-adaptive with topk != 1 and falls back "
            "to static parameters; the config below only applies to a topk=1 chain launch"
        )
    print("SGLang --speculative-adaptive --speculative-adaptive-config <file with> (warm cut):")
    print(json.dumps(rec.sglang_config))
    return 0


# ------------------------------------------------------------------------------ line-up
def lineup(
    fit: CostModel,
    shape: DraftShape,
    alpha: float,
    *,
    prefer_specfsm: bool = True,
    names: Sequence[str] | None = None,
    zero_tax_lazy_prefill: bool = True,
) -> list[Controller]:
    """Every policy, each with its best static parameters from the FIT cost model.

    * sglang-adaptive: SGLang 0.5.23's default adaptive config and EMA settings, launched with
      the scenario's shape (a chain's steps are the initial steps); a tree (topk != 1) makes
      SGLang disable adaptive, so it runs the tree statically (= always-spec).
    * vllm-bs-table: cut-off at the fit table's crossover against a WARM off step (its K=0
      still runs the draft at q=1), no hysteresis.
    * trtllm-max-conc: cut-off at the crossover against a plain (zero-tax) off step (off is a
      true plain decode), no hysteresis, catch-up on re-enable.
    * specfsm-threshold-warm: ThresholdPolicy from the warm crossover, warm PLAIN.
    * specfsm-warm: GoodputPolicy(plain="warm") through the FSM with warm PLAIN: what ships.
    * specfsm-zero-tax: GoodputPolicy(plain="zero-tax") with zero-tax PLAIN (and lazy draft
      prefill unless `zero_tax_lazy_prefill` is False): the follow-up issue's design target.
    """
    acc = accept_length(alpha, shape)
    fit_s = fit.with_shape(shape)
    rec_w = recommend(fit_s, acc, plain=PLAIN_WARM)
    rec_z = recommend(fit_s, acc, plain=PLAIN_ZERO_TAX)
    all_: list[Controller] = [
        FixedController(False, shape),
        FixedController(True, shape),
        SGLangAdaptiveController(shape=shape),
        BatchTableController(rec_w.threshold_high, shape),
        MaxConcurrencyController(rec_z.threshold_high, shape),
        FSMController(
            "specfsm-threshold-warm",
            rec_w.threshold_policy(),
            shape,
            prefer_specfsm,
            plain=PLAIN_WARM,
        ),
        FSMController(
            WARM_NAME,
            GoodputPolicy(fit_s, acc, plain=PLAIN_WARM),
            shape,
            prefer_specfsm,
            plain=PLAIN_WARM,
        ),
        FSMController(
            ZERO_TAX_NAME,
            GoodputPolicy(fit_s, acc, plain=PLAIN_ZERO_TAX),
            shape,
            prefer_specfsm,
            plain=PLAIN_ZERO_TAX,
            lazy_draft_prefill=zero_tax_lazy_prefill,
        ),
    ]
    if names:
        all_ = [c for c in all_ if c.name in names]
    return all_


#: specfsm's GoodputPolicy in the PLAIN the SGLang adapter ships (warm) and in the design
#: target's (zero-tax).
WARM_NAME = "specfsm-warm"
ZERO_TAX_NAME = "specfsm-zero-tax"
SPECFSM_NAMES = ("specfsm-threshold-warm", WARM_NAME, ZERO_TAX_NAME)
STATIC_NAMES = ("no-spec", "always-spec")
PEER_NAMES = ("sglang-adaptive", "vllm-bs-table", "trtllm-max-conc")


def named_traces(duration_s: float) -> dict[str, Load]:
    """The three time-varying traces of the sweep (closed loop, target concurrency), by the
    name `specfsm sim --trace` takes (their `Load.name`s carry the levels: ramp1-256, ...)."""
    return {
        "ramp": ramp(1, 256, duration_s),
        "bursts": bursts(2, 128, duration_s / 8, duration_s),
        "sine": sinusoid(2, 200, duration_s / 3, duration_s),
    }


def traces(duration_s: float) -> list[Load]:
    """The three time-varying traces of the sweep (closed loop, target concurrency)."""
    return list(named_traces(duration_s).values())


#: Every policy `lineup` knows, by name (`specfsm sim --policies`).
POLICY_NAMES = (*STATIC_NAMES, *PEER_NAMES, *SPECFSM_NAMES)


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


# ------------------------------------------------------------------------------ output
class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int, label: str = "", enabled: bool = True) -> None:
        self.total, self.n, self.label = total, 0, label
        self.enabled = enabled and total > 0
        self.t0 = time.monotonic()

    def tick(self, what: str = "") -> None:
        self.n += 1
        if not self.enabled:
            return
        frac = self.n / self.total
        bar = "#" * int(30 * frac)
        el = time.monotonic() - self.t0
        eta = el / frac - el if frac > 0 else 0.0
        sys.stderr.write(
            f"\r{self.label} [{bar:<30}] {self.n}/{self.total} "
            f"{el:5.0f}s eta {eta:4.0f}s {what[:40]:<40}"
        )
        if self.n == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


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

    from specfsm.timeline_plot import draw_mode_timeline, spans_from_samples

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


# ------------------------------------------------------------------------------ sim CLI
def sim_main(argv: list[str] | None = None) -> int:
    ap = ArgParser(prog="specfsm sim", description=__doc__)
    ap.add_argument("--fit-table", default=SHARED_REF, help="table the policies are tuned on")
    ap.add_argument(
        "--table", default=None, help="table the run is scored on (default: --fit-table)"
    )
    ap.add_argument("--ctx", type=positive_int, default=None)
    ap.add_argument("--shape", type=parse_shape, default=SHAPES["chain3"])
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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    require_extra("", "sim", "numpy", "matplotlib")
    from specfsm import sim

    fit = cost_model("--fit-table", a.fit_table, a.shape, a.ctx)
    score = cost_model(
        "--table" if a.table else "--fit-table", a.table or a.fit_table, a.shape, a.ctx
    )
    levels: list[int] = a.levels
    pick = {"ramp": ["ramp"], "bursts": ["bursts"], "sine": ["sine"]}
    trace_names = pick.get(a.trace, ["ramp", "bursts", "sine"] if a.trace == "all" else [])
    if not (levels or a.poisson or trace_names):
        raise UsageError("nothing to run: --levels is empty and no --poisson or --trace given")
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {a.out}: cannot create: {exc.strerror}") from None
    if (a.table or a.fit_table) == a.fit_table:
        print("warning: scored on the table the policies were fitted on", file=sys.stderr)
    names = a.policies or None
    loads: list[tuple[Load, int | None, int]] = []
    loads += [(fixed_concurrency(c), a.iterations + a.warmup, a.warmup) for c in levels]
    loads += [(sim.poisson(r, a.duration), None, 0) for r in a.poisson]
    tr = named_traces(a.duration)
    for k in trace_names:
        loads.append((tr[k], None, 0))
    n_pol = len(lineup(fit, a.shape, a.alpha, names=names))
    prog = Progress(len(loads) * n_pol, "sim", not a.no_progress)
    all_rows: list[dict[str, object]] = []
    tput: dict[str, list[float]] = {}
    for load, iters, warm in loads:
        rows = []
        timelines = []
        for ctl in lineup(fit, a.shape, a.alpha, names=names):
            r = sim.run(
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
            elif ctl.name in (WARM_NAME, ZERO_TAX_NAME, "sglang-adaptive", "vllm-bs-table"):
                timelines.append(r)
            prog.tick(f"{load.name} {ctl.name}")
        print(
            f"\n== load {load.name}  (shape {a.shape.label()}, alpha {a.alpha}, "
            f"fit {fit.table.source}, score {score.table.source})"
        )
        print(format_table(rows))
        all_rows += rows
        if timelines:
            plot_timeline(
                os.path.join(a.out, f"timeline_{load.name.replace('/', '_')}.png"),
                timelines,
                f"{load.name}, {a.shape.label()}, alpha {a.alpha}",
            )
    write_csv(os.path.join(a.out, "sim.csv"), all_rows)
    if levels and tput:
        plot_throughput(
            os.path.join(a.out, "throughput_vs_concurrency.png"),
            levels,
            tput,
            f"{a.shape.label()}, alpha {a.alpha}, scored on {score.table.source}",
        )
    print(f"\nwrote {a.out}/sim.csv and plots", file=sys.stderr)
    return 0 if all(math.isfinite(float(str(r["tok_s"]))) for r in all_rows) else 1


if __name__ == "__main__":  # pragma: no cover
    from specfsm.cli import main

    raise SystemExit(main(["sim", *sys.argv[1:]]))
