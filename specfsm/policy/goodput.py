"""GoodputPolicy: speculate when the cost model predicts more accepted tokens per second.

Each iteration the policy compares, at the observed decode batch size bs,

    plain goodput  = bs / off_ms(bs)       (off_ms: what PLAIN costs, see `plain` below)
    spec goodput   = bs * ema_accept_len / spec_ms(bs)

from a `CostModel` (a step-cost table fitted offline) and an online EMA of the accept length
(tokens committed per verify incl. the bonus; updated only from verifies seen while
SPECULATING). The EMA weighs verified requests, not iterations: `ema_alpha` is the weight of one
request's verify, so an iteration of n verifies moves the estimate by 1 - (1 - ema_alpha)^n of
the way to their mean. At bs 1 the estimate then averages ~1/ema_alpha verifies (100 by default:
+-0.1 tokens for a chain of 3 at alpha 0.6) instead of swinging with each one; at bs 64 it
follows a real change within a few iterations. In PLAIN there are no verifies to learn from, so
an estimate below the prior relaxes back toward it with a half-life of `relax_half_life` PLAIN
iterations: without that, a low stretch (a hard prompt, or noise) that tipped the policy into
PLAIN at low load would keep it there for good, since nothing in PLAIN could raise the estimate
again. If acceptance really is low, the probe costs one `min_dwell` in SPECULATING per
relaxation. It moves toward the mode whose predicted goodput is higher by more than `margin`
(relative hysteresis), after `debounce` consecutive iterations agreeing and at least `min_dwell`
iterations in the current mode.

`plain` says which PLAIN implementation the engine runs, as the SGLang adapter's config names
it: "zero_tax" (default, the adapter's default too: one target decode forward per step, priced
by `CostModel.zero_tax_ms` from the measured rows, ~1.01x a decode step on the H200) or "warm"
(config ``plain: "warm"``: SGLang's steps=0 forward, a 1-token verify plus a 1-token
draft-extend, `CostModel.warm_ms`, ~2x a decode step; RESYNCING is one such forward, so there is
no catch-up to pay for). "zero-tax" is accepted for "zero_tax". With "zero_tax", leaving PLAIN
additionally requires that the time saved over `horizon` iterations pays for the RESYNCING
catch-up (a batched draft-extend over the lag tokens, an estimate from the table's draft-extend
rows; the lag is bs x iterations in PLAIN, at most `lag_cap` per request: requests turn over,
and the adapter catches up at most its `lag_tokens`, 128 by default, per request).

With a table that measures several context lengths (e.g. ``"h200_sglang0517_llama8b+
h200_sglang0517_llama8b_ctx4096"``) both goodputs are priced at the iteration's `mean_ctx`
(bucketed by `ctx_bucket` tokens): on an H200 the crossover batch size of a chain of 3 at
alpha 0.6 against zero-tax PLAIN is 28 at 1024 tokens and 10 at 4096, so one context-blind
setting is wrong by ~3x somewhere. A single-context table, or `mean_ctx` 0 (unknown), uses
the configured context.

The policy registry (`specfsm.policy.registry`) builds one from its JSON-style description
(``{"name": "goodput", ...}``, or the shorthand ``goodput:shape=chain3,accept_len=2.5``).

Inputs are `decode_bs`, `mean_ctx` and `accept_lens` only (identical on every TP/DP rank), so
ranks agree.
State: the EMA, a streak counter, the mode-entry iteration, and a per-bs prediction cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.model.acceptance import parse_shape
from specfsm.model.costs import (
    PLAIN_VARIANTS,
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    SHARED_REF,
    CostModel,
    check_plain_variant,
    load_table,
)
from specfsm.policy.base import Hysteresis


class GoodputPolicy(Hysteresis):
    """Pick the mode with the higher predicted goodput; hysteresis margin, debounce, dwell."""

    def __init__(
        self,
        cost: CostModel,
        accept_len: float,
        *,
        ema_alpha: float = 0.01,
        margin: float = 0.02,
        debounce: int = 4,
        min_dwell: int = 32,
        horizon: int = 64,
        lag_cap: int = 128,
        relax_half_life: int = 512,
        ctx_bucket: int = 256,
        plain: str = PLAIN_ZERO_TAX,
    ) -> None:
        try:
            plain = check_plain_variant(plain)
        except ValueError:
            raise ValueError(
                f"GoodputPolicy: plain must be one of {PLAIN_VARIANTS}: {plain!r}"
            ) from None
        if accept_len < 1.0:
            raise ValueError(f"GoodputPolicy: accept_len (incl. bonus) must be >= 1: {accept_len}")
        if not 0.0 < ema_alpha <= 1.0:
            raise ValueError(f"GoodputPolicy: ema_alpha must be in (0, 1]: {ema_alpha}")
        if margin < 0:
            raise ValueError(f"GoodputPolicy: margin must be >= 0: {margin}")
        if debounce < 1 or min_dwell < 0 or horizon < 1:
            raise ValueError("GoodputPolicy: need debounce >= 1, min_dwell >= 0, horizon >= 1")
        if ctx_bucket < 1:
            raise ValueError(f"GoodputPolicy: ctx_bucket must be >= 1: {ctx_bucket}")
        if relax_half_life < 0:
            raise ValueError(f"GoodputPolicy: relax_half_life must be >= 0: {relax_half_life}")
        super().__init__(debounce, min_dwell)
        self.cost = cost
        self.prior_accept_len = float(accept_len)
        self.ema_accept_len = float(accept_len)
        self.ema_alpha = ema_alpha
        self.margin = margin
        self.horizon = horizon
        self.lag_cap = lag_cap
        self.relax_half_life = relax_half_life
        self.ctx_bucket = ctx_bucket
        #: the table measures several context lengths: price each iteration at its mean_ctx
        self.ctx_aware = len(cost.contexts) > 1
        #: fraction of (prior - estimate) recovered per PLAIN iteration (0: never)
        self._relax = 1.0 - 0.5 ** (1.0 / relax_half_life) if relax_half_life else 0.0
        self.plain = plain
        self._cache: dict[tuple[int, int], tuple[float, float]] = {}  # (bs, ctx) -> (off, spec) ms
        self._weights: dict[int, float] = {}  # verifies in one iteration -> EMA weight

    def _bucket(self, ctx: int) -> int:
        """The context the costs are priced at: 0 (the configured one) unless the table is
        multi-context and `ctx` is known, else `ctx` rounded to a multiple of `ctx_bucket`."""
        if ctx <= 0 or not self.ctx_aware:
            return 0
        return CostModel.ctx_bucket_of(ctx, self.ctx_bucket)

    def _model(self, ctx: int) -> CostModel:
        """The cost model at context `ctx` (0: the configured one)."""
        b = self._bucket(ctx)
        return self.cost.at_ctx_bucket(b, self.ctx_bucket) if b else self.cost

    def _costs(self, bs: int, ctx: int = 0) -> tuple[float, float]:
        key = (bs, self._bucket(ctx))  # the same bucket the model below is priced at
        c = self._cache.get(key)
        if c is None:
            m = self._model(ctx)
            c = (m.off_ms(bs, self.plain), m.spec_ms(bs))
            if len(self._cache) < 65536:
                self._cache[key] = c
        return c

    def predict(
        self, bs: int, accept_len: float | None = None, ctx: int = 0
    ) -> tuple[float, float]:
        """(plain, spec) predicted output tokens/s at decode batch size bs and mean context ctx
        (0: the configured context; only a table with several contexts uses it)."""
        if bs <= 0:
            return 0.0, 0.0
        acc = self.ema_accept_len if accept_len is None else accept_len
        p_ms, s_ms = self._costs(bs, ctx)
        return 1000.0 * bs / p_ms, 1000.0 * bs * acc / s_ms

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        self._seen(mode, obs.iteration)
        if mode is Mode.SPECULATING and obs.accept_lens:
            n = len(obs.accept_lens)
            w = self._weights.get(n)
            if w is None:
                w = self._weights[n] = 1.0 - (1.0 - self.ema_alpha) ** n
            mean = sum(obs.accept_lens) / n
            self.ema_accept_len += w * (mean - self.ema_accept_len)
        elif mode is Mode.PLAIN and self.ema_accept_len < self.prior_accept_len:
            self.ema_accept_len += self._relax * (self.prior_accept_len - self.ema_accept_len)
        if mode is Mode.DRAINING:
            return None
        bs = obs.decode_bs
        if bs <= 0:
            self._streak = 0
            return None
        ctx = obs.mean_ctx
        plain, spec = self.predict(bs, None, ctx)
        if mode is Mode.PLAIN:
            past = spec > plain * (1.0 + self.margin)
            if past and self.plain != PLAIN_WARM:
                p_ms, s_ms = self._costs(bs, ctx)
                lag = bs * min(self.lag_cap, max(1, obs.iteration - self._since))
                saved = self.horizon * (p_ms - s_ms / self.ema_accept_len)
                past = saved > self._model(ctx).catchup_ms(bs, lag)
        else:
            past = plain > spec * (1.0 + self.margin)
        ev = self._confirm(past, mode, obs.iteration)
        if ev is None:
            return None
        if mode is Mode.PLAIN:
            self.last_reason = (
                f"goodput: spec {spec:.0f} > plain {plain:.0f} tok/s x (1+{self.margin}) at "
                f"bs={bs}, ctx={ctx}, accept_len={self.ema_accept_len:.2f}"
            )
        else:
            self.last_reason = (
                f"goodput: plain {plain:.0f} > spec {spec:.0f} tok/s x (1+{self.margin}) at "
                f"bs={bs}, ctx={ctx}, accept_len={self.ema_accept_len:.2f}"
            )
        return ev

    def describe(self) -> dict[str, object]:
        return {
            "policy": "goodput",
            "accept_len": self.prior_accept_len,
            "ema_alpha": self.ema_alpha,
            "margin": self.margin,
            "debounce": self.debounce,
            "min_dwell": self.min_dwell,
            "horizon": self.horizon,
            "lag_cap": self.lag_cap,
            "relax_half_life": self.relax_half_life,
            "ctx_aware": self.ctx_aware,
            "ctx_bucket": self.ctx_bucket,
            "plain": self.plain,
            "cost": self.cost.describe(),
        }


#: GoodputPolicy's keyword parameters that `goodput_from_args` passes through.
_KEYWORDS: dict[str, type] = {
    "ema_alpha": float,
    "margin": float,
    "debounce": int,
    "min_dwell": int,
    "horizon": int,
    "lag_cap": int,
    "relax_half_life": int,
    "ctx_bucket": int,
    "plain": str,
}


def _number(key: str, value: Any, kind: type) -> Any:
    if kind is str:
        if not isinstance(value, str):
            raise ValueError(f"goodput policy: {key} must be a string, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"goodput policy: {key} must be a number, got {value!r}")
    if kind is int:
        if float(value) != int(value):
            raise ValueError(f"goodput policy: {key} must be an integer, got {value!r}")
        return int(value)
    return float(value)


def goodput_from_args(args: Mapping[str, Any]) -> GoodputPolicy:
    """Build a GoodputPolicy from its JSON-style arguments (the registry's "goodput" entry).

    Keys: ``table`` (a packaged table name or a CSV path, or a list of them / "a+b" merged into
    one table, e.g. the same engine at two context lengths; default the shared H200 reference),
    ``shape`` (required: "chain3", "tree", "topk,steps,tokens", [topk, steps, tokens] or an
    object; must be the shape the server runs), ``ctx`` (optional context length for the table
    lookup; with a table of several contexts the policy prices each iteration at the batch's
    mean KV length and uses ``ctx`` only when that is unknown), ``accept_len`` (required: mean
    tokens per verify incl. the bonus, >= 1), and GoodputPolicy's keyword parameters
    ``ema_alpha``, ``margin``, ``debounce``, ``min_dwell``, ``horizon``, ``lag_cap``,
    ``relax_half_life``, ``ctx_bucket``, ``plain`` ("zero_tax", the default and the adapter's
    default PLAIN, or "warm": it must name the PLAIN the server runs). Raises ValueError with
    the reason on anything missing, unknown or invalid.
    """
    if not isinstance(args, Mapping):
        raise ValueError(f"goodput policy: expected an object, got {args!r}")
    known = {"table", "shape", "ctx", "accept_len", *_KEYWORDS}
    unknown = sorted(set(args) - known)
    if unknown:
        raise ValueError(f"goodput policy: unknown keys {unknown} (known: {sorted(known)})")
    for key in ("shape", "accept_len"):
        if key not in args:
            raise ValueError(f"goodput policy: {key!r} is required")
    shape = parse_shape(args["shape"])
    accept_len = _number("accept_len", args["accept_len"], float)
    ctx = args.get("ctx")
    if ctx is not None:
        ctx = _number("ctx", ctx, int)
        if ctx <= 0:
            raise ValueError(f"goodput policy: ctx must be > 0, got {ctx}")
    table_name = args.get("table", SHARED_REF)
    if isinstance(table_name, (list, tuple)) and table_name:
        if not all(isinstance(t, str) and t for t in table_name):
            raise ValueError(f"goodput policy: table list must hold names or paths: {table_name!r}")
        table_name = "+".join(table_name)
    if not isinstance(table_name, str) or not table_name:
        raise ValueError(f"goodput policy: table must be a name or a path, got {table_name!r}")
    try:
        table = load_table(table_name)
        cost = CostModel(table, shape, ctx=ctx)
        cost.spec_ms(1)
        cost.warm_ms(1)
        cost.zero_tax_ms(1)
    except (OSError, KeyError, ValueError) as exc:
        raise ValueError(f"goodput policy: cannot use table {table_name!r}: {exc}") from exc
    kwargs = {k: _number(k, args[k], kind) for k, kind in _KEYWORDS.items() if k in args}
    return GoodputPolicy(cost, accept_len, **kwargs)
