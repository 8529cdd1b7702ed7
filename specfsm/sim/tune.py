"""Tuning maths: the crossover batch size from a cost table, the ThresholdPolicy and
GoodputPolicy parameters it recommends, the equivalent SGLang adaptive config, and the
per-batch-size shape table (`shape_table`: the best draft shape or PLAIN at each bs)."""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from typing import Any

import attrs

from specfsm._extras import UsageError
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import (
    DraftShape,
    accept_length,
    shape_text,
)
from specfsm.model.costs import (
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    PLAIN_ZERO_TAX_MODEL,
    CostModel,
    load_table,
    overlay_table,
)
from specfsm.model.tables import ENGINE_TABLE
from specfsm.policy.simple import ThresholdPolicy

#: SGLang 0.5.23 DEFAULT_ADAPTIVE_CONFIG (speculative/adaptive_spec_params.py).
SGLANG_DEFAULT_ADAPTIVE: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0},
}


def sglang_spec_cuda_graph_bs(max_bs: int) -> list[int]:
    """SGLang 0.5.23 decode CUDA-graph batch sizes with speculation (cuda_graph_hook.py)."""
    bs = (
        list(range(1, 9))
        + list(range(10, 33, 2))
        + list(range(40, 65, 4))
        + list(range(72, 257, 8))
        + list(range(272, max_bs + 1, 16))
    )
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


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

    `plain` is the PLAIN implementation not speculating costs: "zero_tax" (the SGLang adapter's
    default, `CostModel.zero_tax_ms`, ~ a decode step) or "warm" (`CostModel.warm_ms`: a 1-token
    verify + a 1-token draft-extend: SGLang steps=0, vLLM K=0, the adapter's ``plain: "warm"``).
    high = crossover - 1 (the largest bs at which speculation still wins); low = the largest bs
    at which speculation wins by at least `low_margin` (so resuming is clearly worth it), capped
    below high. The SGLang-equivalent config always uses the warm crossover (its
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


def plain_priced(cost: CostModel, plain: str) -> str:
    """How `cost` prices PLAIN `plain`, in one line (measured rows or an estimate)."""
    src = cost.table.source
    if plain == PLAIN_WARM:
        if cost.plain_warm_measured:
            return f"warm PLAIN priced from {src}'s measured plain_warm_step rows"
        return "warm PLAIN priced as an ESTIMATE from its parts (no plain_warm_step rows)"
    if cost.zero_tax_measured:
        r = [cost.zero_tax_ratio(b) for b in (1, 256)]
        ctxs = cost.table.contexts(PLAIN_ZERO_TAX_MODEL)
        where = (
            ""
            if cost.ctx in ctxs
            else f"; the ratio measured at ctx {min(ctxs, key=lambda c: abs(c - cost.ctx))} "
            f"carried to ctx {cost.ctx}"
        )
        return (
            f"zero_tax PLAIN priced from {src}'s measured {PLAIN_ZERO_TAX_MODEL} rows: "
            f"{r[0]:.3f}x a decode step at bs 1, {r[1]:.3f}x at bs 256{where}"
        )
    return "zero_tax PLAIN priced as an ESTIMATE: decode step x 1.0 (no measured rows)"


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


_SPEC = Mode.SPECULATING.value


def accept_from_log(path: str) -> float | None:
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
                and rec.get("mode", _SPEC) in (_SPEC, repr(Mode.SPECULATING))
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


def cost_model(
    flag: str, table: str, shape: DraftShape, ctx: int | None, profile: str | None = None
) -> CostModel:
    """The cost model of `table` (with `profile`'s series laid over it, `overlay_table`: an
    engine's start-up profile), or UsageError naming `flag`, the table and what is wrong."""
    if profile is not None:
        try:
            prof = load_table(profile)
        except (OSError, ValueError) as exc:
            why = str(exc.strerror if isinstance(exc, OSError) and exc.filename else exc)
            raise UsageError(f"--profile {profile}: {why}") from None
    try:
        if profile is not None:
            return CostModel(overlay_table(load_table(table), prof), shape, ctx=ctx)
        return CostModel(load_table(table), shape, ctx=ctx)
    except (OSError, ValueError) as exc:
        why = str(exc.strerror if isinstance(exc, OSError) and exc.filename else exc)
        # the message names the table already (load_table, parse_table, check_models)
        raise UsageError(f"{flag}: {why}" if table in why else f"{flag} {table}: {why}") from None


def check_ctx(cost: CostModel, ctx: int | None) -> None:
    """Refuse a context outside the table's measured contexts: pricing there would extrapolate
    (a single-context table prices every ctx as its own, silently)."""
    ctxs = cost.contexts
    if ctx is not None and not min(ctxs) <= ctx <= max(ctxs):
        rng = str(ctxs[0]) if len(ctxs) == 1 else f"{min(ctxs)}-{max(ctxs)}"
        raise UsageError(
            f"--ctx {ctx}: outside {cost.table.source}'s measured contexts ({rng}); give a table "
            f"that measures it (a+b merges tables, e.g. {ENGINE_TABLE}+{ENGINE_TABLE}_ctx4096) "
            "or --profile"
        )


def max_measured_bs(cost: CostModel) -> int:
    """The largest batch size the target is measured at (rows above it are extrapolated)."""
    return max(cost.table.batch_sizes(cost.target))


# ------------------------------------------------------------------------------ shape table
#: The batch sizes of `specfsm tune --shapes`' per-batch-size table.
SHAPE_TABLE_BS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)


@attrs.frozen
class ShapeRow:
    """One batch size of the shape table: the best choice (None: PLAIN), its tok/s, the best
    single static choice's tok/s at this bs, and every candidate's tok/s."""

    bs: int
    best: DraftShape | None
    tok_s: float
    static_tok_s: float
    tps: dict[DraftShape | None, float]

    @property
    def ratio(self) -> float:
        return self.tok_s / self.static_tok_s if self.static_tok_s > 0 else float("nan")


@attrs.frozen
class ShapeTable:
    """`shape_table`'s result: rows per bs, the best single static choice over them, the
    accept length each shape is priced with, and why a shape's cost is interpolated."""

    rows: list[ShapeRow]
    static: DraftShape | None
    accept: dict[DraftShape, float]
    interpolated: dict[DraftShape, list[str]]
    alpha: float
    plain: str


def shape_table(
    cost: CostModel,
    alpha: float,
    shapes: Sequence[DraftShape],
    *,
    plain: str = PLAIN_ZERO_TAX,
    batch_sizes: Sequence[int] = SHAPE_TABLE_BS,
    rho: float = 0.5,
) -> ShapeTable:
    """Per batch size, the shape (or PLAIN) with the highest predicted tok/s on `cost` at
    per-token acceptance `alpha` (each shape's accept length from `accept_length`, the module's
    tree approximation), PLAIN priced as `plain`. The best single static choice is the one
    (PLAIN included) with the highest geometric mean over the rows of its tok/s relative to
    the row's best; each row's ratio is the best choice over that static one. A shape whose
    verify width or draft step the table does not measure is priced by interpolation and
    listed in `interpolated` (`CostModel.unmeasured`)."""
    cands: list[DraftShape | None] = [None, *dict.fromkeys(shapes)]
    accept = {s: accept_length(alpha, s, rho) for s in cands if s is not None}
    per_bs: list[dict[DraftShape | None, float]] = []
    for bs in batch_sizes:
        tps: dict[DraftShape | None, float] = {None: cost.off_tps(bs, plain)}
        for s, acc in accept.items():
            tps[s] = cost.spec_tps(bs, acc, s)
        per_bs.append(tps)

    def score(c: DraftShape | None) -> float:
        return sum(math.log(t[c] / max(t.values())) for t in per_bs)

    static = max(cands, key=score)
    rows = []
    for bs, tps in zip(batch_sizes, per_bs, strict=True):
        best = max(cands, key=lambda c, t=tps: t[c])  # type: ignore[misc]
        rows.append(ShapeRow(bs, best, tps[best], tps[static], tps))
    interpolated = {s: r for s in accept if (r := cost.unmeasured(s))}
    return ShapeTable(rows, static, accept, interpolated, alpha, plain)


def choice_label(shape: DraftShape | None, table: ShapeTable | None = None) -> str:
    """ "PLAIN" or the shape's short text, with "*" when `table` flags it interpolated."""
    if shape is None:
        return "PLAIN"
    mark = "*" if table is not None and shape in table.interpolated else ""
    return shape_text(shape) + mark
