"""Tuning maths: the crossover batch size from a cost table, the ThresholdPolicy and
GoodputPolicy parameters it recommends, and the equivalent SGLang adaptive config."""

from __future__ import annotations

import bisect
import json
from typing import Any

import attrs

from specfsm._extras import UsageError
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import (
    DraftShape,
)
from specfsm.model.costs import (
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    PLAIN_ZERO_TAX_MODEL,
    CostModel,
    load_table,
)
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


def cost_model(flag: str, table: str, shape: DraftShape, ctx: int | None) -> CostModel:
    """The cost model of `table`, or UsageError naming `flag`, the table and what is wrong."""
    try:
        return CostModel(load_table(table), shape, ctx=ctx)
    except (OSError, ValueError) as exc:
        why = str(exc.strerror if isinstance(exc, OSError) and exc.filename else exc)
        # the message names the table already (load_table, parse_table, check_models)
        raise UsageError(f"{flag}: {why}" if table in why else f"{flag} {table}: {why}") from None
