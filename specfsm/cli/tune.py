"""`specfsm tune`: crossover bs, recommended ThresholdPolicy / GoodputPolicy parameters, and the
equivalent SGLang `--speculative-adaptive-config` JSON, from a cost table and an accept length
(or alpha, or a recorded specfsm transition/observation log). With ``--shapes``, also the
per-batch-size shape table: the best draft shape (or PLAIN) at each bs, its predicted tok/s and
its ratio to the best single static choice; a shape whose verify width or draft step the table
does not measure is priced by interpolation and flagged with "*"."""

from __future__ import annotations

import argparse
import json
import sys

from specfsm.cli.args import (
    ArgParser,
    UsageError,
    accept_len,
    add_command,
    draft_shape,
    positive_int,
    probability,
)
from specfsm.model.acceptance import (
    NAMED_SHAPES,
    DraftShape,
    accept_length,
    alpha_from_accept_length,
    parse_shape_list,
    shape_text,
)
from specfsm.model.costs import (
    PLAIN_VARIANTS,
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    check_plain_variant,
    packaged_tables,
)
from specfsm.model.tables import ENGINE_TABLE
from specfsm.sim.tune import (
    ShapeTable,
    accept_from_log,
    check_accept_len,
    check_ctx,
    choice_label,
    cost_model,
    max_measured_bs,
    plain_priced,
    recommend,
    shape_table,
)


def plain_variant(text: str) -> str:
    """--plain's value, normalized ("zero-tax" -> "zero_tax"); argparse's choices refuse others."""
    try:
        return check_plain_variant(text)
    except ValueError:
        return text


def shape_list(text: str) -> tuple[DraftShape, ...]:
    """--shapes' value: shapes separated by commas, a tree as topk,steps,tokens."""
    try:
        return parse_shape_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_command(subparsers, "tune", "crossover and ThresholdPolicy from a cost table", main)


def main(argv: list[str] | None = None) -> int:
    ap = ArgParser(prog="specfsm tune", description=__doc__)
    ap.add_argument(
        "--table",
        default=ENGINE_TABLE,
        help=f"a CSV path or one of {packaged_tables()}; a+b merges two tables (e.g. both "
        f"contexts: {ENGINE_TABLE}+{ENGINE_TABLE}_ctx4096); default {ENGINE_TABLE} (measured "
        "inside SGLang 0.5.17 on an H200, the goodput policy's and logs replay's default)",
    )
    ap.add_argument(
        "--ctx",
        type=positive_int,
        default=None,
        help="context length (default: the table's first); one outside the table's measured "
        "contexts is refused",
    )
    ap.add_argument(
        "--shape",
        type=draft_shape,
        default=NAMED_SHAPES["chain3"],
        help="chain3 | tree | chainN | topk,steps,tokens",
    )
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--accept-len", type=accept_len, help="mean tokens per verify incl. bonus")
    g.add_argument("--alpha", type=probability, help="per-token acceptance rate, in [0, 1]")
    g.add_argument("--log", help="specfsm JSON-lines log with accept_lens fields")
    ap.add_argument(
        "--plain",
        type=plain_variant,
        choices=list(PLAIN_VARIANTS),
        default=PLAIN_ZERO_TAX,
        help="the PLAIN implementation the server runs (the SGLang adapter's config key "
        "plain): zero_tax (its default: one target decode forward per step, the draft caught "
        "up in RESYNCING) or warm (SGLang's steps=0: a 1-token verify + 1-token draft-extend "
        "every step); default zero_tax",
    )
    ap.add_argument(
        "--shapes",
        type=shape_list,
        default=None,
        help="also print the per-batch-size shape table over these shapes, e.g. "
        "chain1,chain2,chain3,chain5,chain7,4,2,16 (a tree is topk,steps,tokens); each shape's "
        "accept length from the alpha of --alpha / --accept-len at --shape",
    )
    ap.add_argument(
        "--profile",
        default=None,
        help="a cost CSV in the table format (e.g. the engine's start-up profile): its "
        "(model, q, ctx) series replace --table's",
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    a = ap.parse_args(argv)
    check_accept_len(a.accept_len, a.shape)
    cost = cost_model("--table", a.table, a.shape, a.ctx, a.profile)
    check_ctx(cost, a.ctx)
    if a.log:
        acc = accept_from_log(a.log)
        if acc is None:
            raise UsageError(f"--log {a.log}: no accept_lens found (a specfsm observation log?)")
        if a.table == ENGINE_TABLE and a.profile is None:
            print(
                f"note: --log gives the accept length only; the steps are priced on {ENGINE_TABLE}"
                " (an H200, Llama-3.1-8B): give --table or --profile for your server's",
                file=sys.stderr,
            )
    elif a.accept_len is not None:
        acc = a.accept_len
    else:
        acc = accept_length(a.alpha if a.alpha is not None else 0.7, a.shape)
    rec = recommend(cost, acc, plain=a.plain)
    other = PLAIN_ZERO_TAX if a.plain == PLAIN_WARM else PLAIN_WARM
    x_other = cost.crossover_bs(acc, 1024, other)
    estimates = cost.estimates(a.plain)
    out = {
        "table": cost.table.source,
        "ctx": cost.ctx,
        "shape": a.shape.label(),
        "accept_len": round(acc, 4),
        "alpha_equiv": round(alpha_from_accept_length(acc, a.shape), 4),
        "plain": a.plain,
        "plain_priced": plain_priced(cost, a.plain),
        "estimates": estimates,
        "crossover_bs": rec.crossover_bs,
        f"crossover_bs_{other}": x_other,
        "threshold_policy": {
            "high": rec.threshold_high,
            "low": rec.threshold_low,
            "debounce": rec.debounce,
            "min_dwell": rec.min_dwell,
        },
        "goodput_policy": {
            "name": "goodput",
            "table": a.table if a.profile is None else a.profile,
            "shape": a.shape.label(),
            "accept_len": round(acc, 4),
            "margin": 0.02,
            "debounce": 4,
            "min_dwell": 32,
            "plain": a.plain,
        },
        "sglang_adaptive_config": rec.sglang_config,
        "measured_bs": max_measured_bs(cost),
    }
    out["config"] = {"policy": out["goodput_policy"], "plain": a.plain}
    table = None
    if a.shapes is not None:
        alpha = alpha_from_accept_length(acc, a.shape)
        table = shape_table(cost, alpha, a.shapes, plain=a.plain)
        out["shape_table"] = {
            "alpha": round(alpha, 4),
            "static_best": choice_label(table.static),
            "accept_len": {shape_text(s): round(v, 4) for s, v in table.accept.items()},
            "interpolated": {shape_text(s): r for s, r in table.interpolated.items()},
            "profiled": [shape_text(s) for s in table.accept if s in cost.step_shapes],
            "rows": [
                {
                    "bs": r.bs,
                    "best": choice_label(r.best),
                    "interpolated": r.best in table.interpolated,
                    "tok_s": round(r.tok_s, 1),
                    "ratio_vs_static": round(r.ratio, 4),
                }
                for r in table.rows
            ],
        }
    if a.json:
        print(json.dumps(out))
        return 0
    print(
        f"table {out['table']} ctx={cost.ctx} shape={out['shape']} accept_len={acc:.3f} "
        f"(alpha~{out['alpha_equiv']})"
    )
    print(f"PLAIN: {a.plain} ({out['plain_priced']})")
    for line in estimates:
        print(f"estimate: {line}")
    print(
        f"{'bs':>5} {'decode tok/s':>12} {'zero_tax tok/s':>14} {'warm tok/s':>11} "
        f"{'spec tok/s':>11} {'spec/zero_tax':>13} {'spec/warm':>9}"
    )
    top = max_measured_bs(cost)
    for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        p, z = cost.plain_tps(bs), cost.off_tps(bs, PLAIN_ZERO_TAX)
        w, s = cost.off_tps(bs, PLAIN_WARM), cost.spec_tps(bs, acc)
        mark = "  EXTRAPOLATED (above the table's bs)" if bs > top else ""
        print(
            f"{bs:>5} {p:>12.0f} {z:>14.0f} {w:>11.0f} {s:>11.0f} {s / z:>13.2f} {s / w:>9.2f}"
            + mark
        )

    def _x(v: int | None) -> str:
        return str(v) if v is not None else "> 1024 (speculation always wins)"

    print(f"crossover bs ({a.plain} PLAIN): {_x(rec.crossover_bs)}")
    print(f"crossover bs ({other} PLAIN): {_x(x_other)}")
    print(
        f"ThresholdPolicy(high={rec.threshold_high}, low={rec.threshold_low}, "
        f"debounce={rec.debounce}, min_dwell={rec.min_dwell})  # for {a.plain} PLAIN"
    )
    print(
        f"GoodputPolicy(cost, accept_len={acc:.3f}, margin=0.02, debounce=4, min_dwell=32, "
        f"plain={json.dumps(a.plain)})"
    )
    if a.shape.topk != 1:
        print(
            "note: SGLang 0.5.23 rejects --speculative-adaptive with topk != 1 and falls back "
            "to static parameters; the config below only applies to a topk=1 chain launch"
        )
    print(
        "for comparison only, SGLang's own adaptive controller (its --speculative-adaptive-config;"
        " specfsm refuses to run beside it), warm cut:"
    )
    print(json.dumps(rec.sglang_config))
    print(
        "specfsm config (SPECFSM_CONFIG file, starts as is; `specfsm config check` it):",
        json.dumps(out["config"]),
    )
    if table is not None:
        print_shape_table(table)
        if table.interpolated and not cost.step_shapes:
            print(
                "note: the * prices rest on the table's interpolation alone (no measured step of "
                "those shapes), and a best choice among them is a guess: on the H200 the "
                "measured whole steps disagreed with such a prior; measure them with the "
                'start-up profile (config "profile": true, docs/sglang.md) and pass its CSV '
                "as --profile"
            )
        if cost.step_shapes:
            for sh in a.shapes:
                if sh not in cost.step_shapes:
                    print(
                        f"note: {shape_text(sh)} has no whole-step rows in the profile: priced "
                        "from the table's forwards, a basis the profiled shapes' measured steps "
                        "do not share; profile it before comparing"
                    )
    return 0


def print_shape_table(table: ShapeTable) -> None:
    """The per-batch-size shape table, text (see the module docstring)."""
    static = choice_label(table.static, table)
    print(
        f"shape table (alpha {table.alpha:.3f}, {table.plain} PLAIN; best single static "
        f"choice: {static}):"
    )
    print(f"{'bs':>5} {'best':<10} {'tok/s':>9} {'vs ' + static:>14}")
    for r in table.rows:
        print(f"{r.bs:>5} {choice_label(r.best, table):<10} {r.tok_s:>9.0f} {r.ratio:>14.3f}")
    print(
        "accept_len: "
        + ", ".join(f"{choice_label(s, table)} {v:.2f}" for s, v in table.accept.items())
    )
    for s, reasons in table.interpolated.items():
        print(f"* {shape_text(s)} INTERPOLATED: {'; '.join(reasons)}")
