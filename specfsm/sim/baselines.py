"""Honest baselines: every static shape of the grid, and each peer engine's rule at
its best parameters FITTED on the fit table (then scored on another table by the sweep).

* Static grid (`STATIC_GRID`), the engine's states: chains of 1, 2, 3, 5, 7 steps, trees
  (topk 4, 2 steps, 16 draft tokens) and (4, 3, 8), and the engine's
  PLAIN state (``plain``: specfsm's own engine pinned in PLAIN, zero-tax steps; every prefill
  through the draft too unless its controller's ``lazy_draft_prefill`` is set, as
  benchmarks/policy_sweep.py sets it by default: the SGLang adapter defers the draft's prefill
  while PLAIN, ``defer_prefill_tokens``). "Best static" of a cell is the highest tok/s among
  them (`best_static`), run on the same load, table and seed.
* A server without a draft model (``no-spec``, `NO_DRAFT_NAME`, `no_draft_server`): kept apart
  from the grid, as an info baseline. Its prefill skips the draft; specfsm's engine in PLAIN
  does so too only with the deferral (else at 128-256 requests, where PLAIN wins, the no-draft
  server is ~2-4% faster than any state of specfsm's engine); the sweep prints that ratio
  beside the goal lines instead of hiding it.
* vLLM (`KTableController`, ``vllm-k-table``): K by the number of scheduled requests (decodes +
  prefills), from a per-batch-size table, no hysteresis; K=0 keeps the draft running at q=1
  (a WARM step, as vLLM's K=0 `propose()` does). `fit_k_table`: for each bs, the K in 0..7 with
  the highest predicted goodput on the fit table (chain of K steps; K=0 priced as a warm step).
* SGLang 0.5.23 adaptive (`specfsm.sim.peers.SGLangAdaptiveController`, the port) with its
  default tiers (``sglang-adaptive``, the launch shape; a tree launch disables adaptive) and with
  tiers tuned on the fit table (``sglang-tuned``, `tune_sglang_tiers`: per CUDA-graph batch size
  the best steps in 0..7, consecutive graph sizes with the same best steps grouped into one tier
  with that single candidate; launched as a chain, since SGLang adaptive needs topk 1).
* SGLang steps=0 with ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1`` (`SkipZeroStepController`,
  ``sglang-skip0``, tuned tiers fitted with steps=0 priced as a plain decode step): steps=0 pays
  no per-step tax (the engine prices kind `SKIP0` as `CostModel.zero_tax_ms`, a plain decode
  step), but the draft is not extended during it, so it re-enters COLD: a request whose draft
  fell behind accepts less for its first `COLD_ROUNDS` K-wide rounds after re-entry. The size of
  the loss is the CPU test bed's measurement (benchmarks/plain_tax.py, recorded in
  docs/zero-tax.md, "Last run, 2026-11-30 18:30 UTC"): mean accept length over the first 10
  K-wide rounds after re-entry, warm 2.250, skip flag (cold) 2.075; rounds 11+ 2.500 vs 2.483
  (recovered). The engine scales the accepted drafts (accept length - 1) of a cold round by
  `COLD_EXTRA_FACTOR` = 1.075 / 1.250 = 0.86, through an alpha giving that accept length for the
  shape. This is the CPU bed's measurement (tiny models), carried to every table: not an H200
  measurement.
* TensorRT-LLM (`DraftLenScheduleController`, ``trtllm-schedule``): ``draft_len_schedule``
  {max batch size: draft length} (a batch above the largest key runs draft length 0, i.e. no
  speculation) + ``max_concurrency`` (no speculation above it), by the number of active
  requests, no hysteresis. Off is a ZERO_TAX step (`CostModel.zero_tax_ms`, the cost of
  specfsm's zero-tax PLAIN step: a target decode that also keeps the target hidden states of
  every token it produces); turning on again pays one catch-up iteration (a RESYNC, priced as
  specfsm's zero-tax RESYNCING: one batched draft-extend over every request's lag).
  `fit_draft_len_schedule`: per bs the best draft length 0..7 on the fit table (0 priced as that
  zero-tax step), compressed into the schedule; max_concurrency = the largest bs with a draft
  length > 0.

  Why off is not a true plain decode (an earlier version priced it so): for EAGLE, a catch-up
  in ONE iteration after an off period must feed the draft the target's hidden states of every
  token produced while off, so the off steps must have captured them, and that capture is
  exactly what specfsm's zero-tax step pays for (measured 1.001-1.013x a decode step on the
  H200, docs/zero-tax.md). A real TensorRT-LLM does one of two things instead: it leaves the
  draft stale while off (its known bug, TensorRT-LLM PR #16888: "the acceptance rate silently
  collapsed for the remainder of every affected request"), or, with that PR's fix, floors the
  draft length at 1, never off. A plain-decode off step plus a one-iteration catch-up is
  neither: it is cheaper than anything an EAGLE server can run. The ZERO_TAX off step is the
  strongest physically consistent version (off, the draft kept catchable, then the one-iteration
  catch-up); no other peer is changed, each keeps its best fitted parameters.

"Fitted" means a grid search over each rule's parameter (K, steps, draft length in 0..7 per
batch size) on the fit table's predicted goodput at the cell's alpha (`CostModel.spec_tps` with
`accept_length`): each peer gets the best per-batch-size choice its rule can express.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape, accept_length
from specfsm.model.costs import CostModel
from specfsm.sim.plan import (
    NO_DRAFT,
    RESYNC,
    SKIP0,
    SPEC,
    WARM,
    ZERO_TAX,
    Controller,
    FixedController,
    Plan,
)
from specfsm.sim.sglang_peer import SGLangAdaptiveController
from specfsm.sim.tune import SGLANG_DEFAULT_ADAPTIVE, sglang_spec_cuda_graph_bs

#: The engine's PLAIN state held: zero-tax steps, the draft prefilled too (lazy_draft_prefill:
#: deferred, as the adapter's defer_prefill_tokens does).
PLAIN_STATE_NAME = "plain"
#: A server without a draft model: plain decode, prefill by the target only (info baseline).
NO_DRAFT_NAME = "no-spec"

#: The static grid (None: the engine's PLAIN state), by the name its controller carries.
STATIC_GRID: dict[str, DraftShape | None] = {
    PLAIN_STATE_NAME: None,
    "static-chain1": DraftShape.chain(1),
    "static-chain2": DraftShape.chain(2),
    "static-chain3": DraftShape.chain(3),
    "static-chain5": DraftShape.chain(5),
    "static-chain7": DraftShape.chain(7),
    "static-tree4x2x16": DraftShape(4, 2, 16),
    "static-tree4x3x8": DraftShape(4, 3, 8),
}
STATIC_GRID_NAMES = tuple(STATIC_GRID)

#: Cold return after SGLang's skip-flag steps=0 (CPU test bed, benchmarks/plain_tax.py,
#: docs/zero-tax.md): K-wide rounds after re-entry that accept less, and the factor on their
#: accepted drafts (first-10-round accept length 2.075 cold vs 2.250 warm: 1.075 / 1.250).
COLD_ROUNDS = 10
FIRST10_ACCEPT_WARM = 2.250
FIRST10_ACCEPT_COLD = 2.075
COLD_EXTRA_FACTOR = (FIRST10_ACCEPT_COLD - 1.0) / (FIRST10_ACCEPT_WARM - 1.0)

#: The K (chain steps) range the peers' rules choose from.
MAX_K = 7

VLLM_NAME = "vllm-k-table"
SGLANG_DEFAULT_NAME = "sglang-adaptive"
SGLANG_TUNED_NAME = "sglang-tuned"
SGLANG_SKIP0_NAME = "sglang-skip0"
TRTLLM_NAME = "trtllm-schedule"
PEER_NAMES = (SGLANG_DEFAULT_NAME, SGLANG_TUNED_NAME, SGLANG_SKIP0_NAME, VLLM_NAME, TRTLLM_NAME)
#: peers whose controller does not depend on the scenario's launch shape
SHAPE_FREE_PEERS = (SGLANG_TUNED_NAME, SGLANG_SKIP0_NAME, VLLM_NAME, TRTLLM_NAME)


# ------------------------------------------------------------------------------ static grid
class StaticController(FixedController):
    """One static state of the grid: a draft shape, or (None) the engine's PLAIN state held
    (zero-tax steps, the draft kept and prefilled: ``has_draft``); `no_draft=True` with None is
    a server without a draft instead (plain decode, prefill by the target only)."""

    def __init__(self, name: str, shape: DraftShape | None, *, no_draft: bool = False) -> None:
        super().__init__(shape is not None, shape if shape is not None else DraftShape.chain(3))
        self.name = name
        self.no_draft = shape is None and no_draft
        self.has_draft = not self.no_draft
        self._plain = Plan(NO_DRAFT if self.no_draft else ZERO_TAX, Mode.PLAIN)

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.speculate:
            return super().plan(it, bs, n_prefill, accept_lens, mean_ctx)
        return self._plain

    def describe(self) -> dict[str, object]:
        if self.speculate:
            what = self.shape.label()
        else:
            what = "none (no draft model)" if self.no_draft else "PLAIN (zero-tax, draft kept)"
        return {"name": self.name, "shape": what}


def static_grid() -> list[Controller]:
    """A controller per static state of `STATIC_GRID`."""
    return [StaticController(n, s) for n, s in STATIC_GRID.items()]


def no_draft_server() -> StaticController:
    """A server without a draft model (`NO_DRAFT_NAME`): the info baseline outside the grid."""
    return StaticController(NO_DRAFT_NAME, None, no_draft=True)


def best_static(tok_s: dict[str, float]) -> tuple[str, float]:
    """(name, tok/s) of the best static shape among `tok_s` (policy name -> tok/s)."""
    name = max((n for n in STATIC_GRID_NAMES if n in tok_s), key=lambda n: tok_s[n])
    return name, tok_s[name]


# ------------------------------------------------------------------------------ fitting
def chain_goodput(fit: CostModel, bs: int, alpha: float, k: int, off: str) -> float:
    """Predicted output tok/s at batch size `bs` of a chain of `k` steps (k >= 1), or of the
    off step `off` ("warm", "plain" or "zero_tax") at k = 0, on `fit`."""
    if k <= 0:
        if off == "warm":
            ms = fit.warm_ms(bs)
        elif off == "plain":
            ms = fit.plain_ms(bs)
        else:
            ms = fit.zero_tax_ms(bs)
        return 1000.0 * bs / ms
    shape = DraftShape.chain(k)
    return fit.spec_tps(bs, accept_length(alpha, shape), shape)


def best_k(fit: CostModel, bs: int, alpha: float, off: str, max_k: int = MAX_K) -> int:
    """The K in 0..max_k with the highest `chain_goodput` (ties: the smaller K)."""
    return max(range(max_k + 1), key=lambda k: (chain_goodput(fit, bs, alpha, k, off), -k))


def fit_k_table(fit: CostModel, alpha: float, max_bs: int = 256) -> list[int]:
    """vLLM's per-batch-size K table: entry bs (1..max_bs; entry 0 unused = entry 1) is the K
    in 0..7 maximizing predicted goodput on `fit` (K=0: a warm step, the draft still runs)."""
    ks = [best_k(fit, bs, alpha, "warm") for bs in range(1, max_bs + 1)]
    return [ks[0], *ks]


def tune_sglang_tiers(
    fit: CostModel, alpha: float, max_bs: int = 256, *, off: str = "warm"
) -> dict[str, Any]:
    """SGLang 0.5.23 adaptive config tuned on `fit`: per CUDA-graph batch size the best steps in
    0..7 (steps=0 priced as `off`: "warm" for SGLang's steps=0, "zero_tax" with the skip flag);
    a tier per run of graph sizes with the same best steps, its single candidate those steps.
    The shared EMA settings are SGLang's defaults (kept as top-level keys, as `specfsm tune`
    prints them)."""
    cfg: dict[str, Any] = {"ema_alpha": 0.2, "warmup_batches": 10, "update_interval": 5}
    last: int | None = None
    for g in sglang_spec_cuda_graph_bs(max_bs):
        k = best_k(fit, g, alpha, off)
        if k != last:
            cfg[str(g)] = {"candidate_steps": [k], "up_hysteresis": 0.0, "down_hysteresis": 0.0}
            last = k
    return cfg


def fit_draft_len_schedule(
    fit: CostModel, alpha: float, max_bs: int = 256
) -> tuple[dict[int, int], int]:
    """TensorRT-LLM (draft_len_schedule, max_concurrency) fitted on `fit`: per bs the best draft
    length 0..7 (0 priced as a zero-tax step: what its off step runs, see the module docstring),
    compressed into {largest bs of a run: draft length}; max_concurrency = the largest bs with a
    length > 0."""
    ks = [best_k(fit, bs, alpha, "zero_tax") for bs in range(1, max_bs + 1)]
    sched: dict[int, int] = {}
    for bs, k in enumerate(ks, 1):
        if bs == max_bs or ks[bs] != k:
            sched[bs] = k
    on = [bs for bs, k in enumerate(ks, 1) if k > 0]
    return sched, (max(on) if on else 0)


# ------------------------------------------------------------------------------ controllers
class KTableController(Controller):
    """vLLM dynamic speculative decoding: K from a per-batch-size table by the number of
    scheduled requests (decodes + prefills), no hysteresis; K=0 keeps the draft running at q=1
    (a WARM step)."""

    def __init__(self, table: Sequence[int], name: str = VLLM_NAME) -> None:
        if len(table) < 2:
            raise ValueError("KTableController: the table needs entries for bs 1..")
        self.table = list(table)
        self.name = name
        self._shapes = {k: DraftShape.chain(k) for k in set(self.table) if k > 0}

    def k_for(self, scheduled: int) -> int:
        return self.table[min(max(1, scheduled), len(self.table) - 1)]

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        k = self.k_for(bs + n_prefill)
        if k > 0:
            return Plan(SPEC, Mode.SPECULATING, self._shapes[k])
        return Plan(WARM, Mode.PLAIN)

    def describe(self) -> dict[str, object]:
        runs: dict[int, int] = {}
        for bs in range(1, len(self.table)):
            if bs == len(self.table) - 1 or self.table[bs + 1] != self.table[bs]:
                runs[bs] = self.table[bs]
        return {"name": self.name, "k_by_bs_upto": runs}


class SkipZeroStepController(SGLangAdaptiveController):
    """SGLang 0.5.23 adaptive with ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1``: steps=0 is a
    `SKIP0` iteration (priced as a plain decode step, the draft not extended: its lag grows) and
    the engine re-enters cold (`cold_return`: `COLD_ROUNDS` rounds at `COLD_EXTRA_FACTOR`)."""

    cold_return = True

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        p = super().plan(it, bs, n_prefill, accept_lens, mean_ctx)
        return Plan(SKIP0, Mode.PLAIN) if p.kind == WARM else p


class DraftLenScheduleController(Controller):
    """TensorRT-LLM: draft length from ``draft_len_schedule`` by active requests (a batch above
    the largest key: 0), speculation off above ``max_concurrency``; no hysteresis; off is a
    ZERO_TAX step (the draft kept catchable: see the module docstring); turning on pays a
    catch-up (RESYNC) iteration."""

    def __init__(
        self, schedule: dict[int, int], max_concurrency: int, name: str = TRTLLM_NAME
    ) -> None:
        self.schedule = dict(sorted(schedule.items()))
        self._keys = list(self.schedule)
        self.max_concurrency = max_concurrency
        self.name = name
        self._shapes = {k: DraftShape.chain(k) for k in self.schedule.values() if k > 0}
        self._on = True

    def draft_len(self, active: int) -> int:
        if active > self.max_concurrency:
            return 0
        i = bisect.bisect_left(self._keys, active)
        return self.schedule[self._keys[i]] if i < len(self._keys) else 0

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        k = self.draft_len(bs + n_prefill)
        if k > 0 and not self._on:
            self._on = True
            return Plan(RESYNC, Mode.RESYNCING)
        self._on = k > 0
        if k > 0:
            return Plan(SPEC, Mode.SPECULATING, self._shapes[k])
        return Plan(ZERO_TAX, Mode.PLAIN)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "draft_len_schedule": self.schedule,
            "max_concurrency": self.max_concurrency,
        }


def _first_steps(cfg: dict[str, Any]) -> int:
    return int(cfg[min((k for k in cfg if k.isdigit()), key=int)]["candidate_steps"][0])


def peers(
    fit: CostModel,
    shape: DraftShape,
    alpha: float,
    *,
    max_bs: int = 256,
    names: Sequence[str] | None = None,
) -> list[Controller]:
    """The peers of `PEER_NAMES` (or `names`) at their best parameters fitted on `fit` at
    `alpha`; `shape` is the scenario's launch shape (only the default-tier SGLang uses it)."""
    want = tuple(names) if names else PEER_NAMES
    out: list[Controller] = []
    if SGLANG_DEFAULT_NAME in want:
        out.append(SGLangAdaptiveController(SGLANG_DEFAULT_ADAPTIVE, max_bs=max_bs, shape=shape))
    if SGLANG_TUNED_NAME in want:
        cfg = tune_sglang_tiers(fit, alpha, max_bs)
        out.append(
            SGLangAdaptiveController(
                cfg, initial_steps=_first_steps(cfg), max_bs=max_bs, name=SGLANG_TUNED_NAME
            )
        )
    if SGLANG_SKIP0_NAME in want:
        cfg = tune_sglang_tiers(fit, alpha, max_bs, off="zero_tax")
        out.append(
            SkipZeroStepController(
                cfg, initial_steps=_first_steps(cfg), max_bs=max_bs, name=SGLANG_SKIP0_NAME
            )
        )
    if VLLM_NAME in want:
        out.append(KTableController(fit_k_table(fit, alpha, max_bs)))
    if TRTLLM_NAME in want:
        sched, mc = fit_draft_len_schedule(fit, alpha, max_bs)
        out.append(DraftLenScheduleController(sched, mc))
    return out


def baselines(
    fit: CostModel, shape: DraftShape, alpha: float, *, max_bs: int = 256
) -> list[Controller]:
    """The static grid and every peer (fitted on `fit` at `alpha`)."""
    return [*static_grid(), *peers(fit, shape, alpha, max_bs=max_bs)]


def controller(name: str, fit: CostModel, shape: DraftShape, alpha: float) -> Controller:
    """One baseline by name (a static grid state, the no-draft server or a peer)."""
    if name in STATIC_GRID:
        return StaticController(name, STATIC_GRID[name])
    if name == NO_DRAFT_NAME:
        return no_draft_server()
    got = peers(fit, shape, alpha, names=(name,))
    if not got:
        raise ValueError(
            f"no baseline {name!r}: one of {(*STATIC_GRID_NAMES, NO_DRAFT_NAME, *PEER_NAMES)}"
        )
    return got[0]
