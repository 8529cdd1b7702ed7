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

Shapes (issue 13): with ``shapes`` (e.g. `DEFAULT_SHAPE_GRID`: chains of 1, 2, 3, 5, 7 steps
and the trees (4, 2, 16), (4, 3, 8); the launch shape `cost.shape` is added when not listed)
the policy chooses among PLAIN and every shape each iteration, at the observed bs and ctx:

    goodput(PLAIN) = bs / off_ms(bs),   goodput(s) = bs * accept(s) / spec_ms(bs, s)

* accept(s) comes from per-(width, depth) acceptance counts learned online from accept_lens
  and accept_shape (`specfsm.policy.learn.DepthAcceptance`: a verify of n accepted drafts hits
  depths 1..n and misses depth n+1; decayed per verify by `depth_ema`, slower than the on/off
  EMA so that noise does not flip near-equal shapes); a depth never observed is predicted from
  the alpha fitted to the observed ones through the tree approximation of
  `specfsm.model.acceptance` (a chain's depth is alpha itself), the prior alpha (implied by
  `accept_len` at the launch shape) weighing as a few pseudo-trials. Trees are therefore
  learned per (width, depth) where they ran, and from the fitted alpha where they did not.
* spec_ms / off_ms are the prior (the shipped table, or `profile`'s series laid over it: the
  engine's start-up profile) x a correction learned from Observation.step_ms / step_bs /
  step_shape / step_kind (`StepCalibration`: per kind and shape, log2-bs buckets, EMA
  `cal_ema`; a shape never measured borrows the smallest measured factor, so it gets tried
  rather than ruled out on another shape's factor; PLAIN never measured keeps the prior).
  Step kinds: "spec" (a verify iteration of step_shape), "plain" (a zero-tax or plain decode
  step), "warm" (a warm step: warm PLAIN, DRAINING's forward); "resync" is not learned from
  (its catch-up depends on the lag). Costs are cached per (bs, ctx bucket) and the cache is
  dropped only when a correction moved by more than 1%, so an iteration is a few dict lookups.
  Predicted accept lengths refresh every `accept_refresh` iterations.
* In SPECULATING: LOAD_HIGH when PLAIN beats the current shape by `margin` and every shape
  (dwell `min_dwell`, `debounce`, as above); else RESHAPE (`next_shape`) when the best shape
  beats the current one by `shape_margin` + `shape_z` standard errors of their predicted
  ratio (both accept lengths hang on the fitted alpha: the error of alpha moves their ratio
  by d log(accept_best / accept_current) / d alpha x sd(alpha); noise in a short window of
  verifies then does not flip two near-equal shapes; `shape_z` is 3: the binomial sd of alpha
  understates the error of a deep depth extrapolated from it, and at 1 the policy left
  chain1 for chain7 at ctx 4096, alpha 0.8, 32 requests on a 3 % predicted gain that measured
  0.3 % worse, and chain5 for chain7 at 4 requests on the Triton table, 0.2 % worse over
  three seeds) for `shape_debounce` iterations and
  `shape_dwell` iterations passed since the last RESHAPE. The first RESHAPE after entering
  SPECULATING (the machine resumes at its current shape; the choice was made in PLAIN, and
  needs no standard-error term) waits only `debounce` iterations; leaving a shape that was
  tried before it was ever measured (it measured no better) one iteration; leaving a
  SPECULATING entered for such a shape, or a PLAIN entered before PLAIN was ever measured,
  needs no debounce or dwell. Such a probe (a PLAIN or a never-measured shape entered to measure
  it) is judged, once measured, at the accept lengths' upper bound: each depth's rate raised by
  `probe_z` standard errors of its (decayed) trials, never above the prior's
  (`DepthAcceptance.accept_length_upper`): the start-up probes leave a few iterations of
  verifies, and a chain1 judged 2.6 standard errors low there (ctx 4096, alpha 0.8, bs 64) kept
  PLAIN for ~4000 iterations, where chain1 wins by less than `margin`. Re-probes from PLAIN
  (`reprobe_*`): while fewer than `reprobe_evidence` SPECULATING iterations were ever measured,
  the acceptance that keeps PLAIN rests on a few iterations (acceptance is correlated within a
  request and drifts with the prompts: a few iterations of a large batch are fewer independent
  samples than their verifies count), so where the prior's accept lengths say a shape would
  beat PLAIN (with the catch-up check), PLAIN re-probes the best shape at the accept lengths'
  upper bound, `reprobe_after` iterations after PLAIN was entered, then `reprobe_after` x 2^n
  after the n-th re-probe that measured no better, at most `reprobe_max` times per PLAIN
  entered by a decision (the check runs every `accept_refresh` iterations). A re-probe goes to
  its shape at once, measures it for `reprobe_len` iterations and is judged once at the upper
  bound without margin (the counts still hold the old verifies): back to PLAIN, or an ordinary
  SPECULATING from then on. Bounded: at most 2 x `reprobe_max` switches per PLAIN stay, spread
  over >= `reprobe_after` x (2^reprobe_max - 1) iterations. PLAIN prices every shape
  never measured on this engine optimistically (the calibration's `probe_discount` below the
  smallest measured factor, or below PLAIN's factor while no speculative step was measured): a
  probe of that shape where the optimistic price beats PLAIN, at most once per shape, since a
  measured shape is priced by its own factor (an interpolated factor can be too high on another
  model size, e.g. chain1 on the 32B-shaped table, and would never be tried); while PLAIN was
  never measured, SPECULATING prices PLAIN so: one probe of PLAIN. In
  PLAIN: LOAD_LOW when the best shape beats PLAIN by `margin` (with zero-tax PLAIN, and the
  catch-up check above for that shape). The first mode the policy sees was not chosen by it:
  no dwell and no debounce there (the prior decides at once: a tree launched at bs 256 leaves
  at once). The current shape is Observation.shape (the machine's) when given, else the
  policy's record.
* `best(bs, ctx)`: the shape (None: PLAIN) with the highest predicted goodput now.

Without ``shapes`` the policy is the on/off policy above (the launch shape only, the
accept-length EMA); the calibration applies to both.

The policy registry (`specfsm.policy.registry`) builds one from its JSON-style description
(``{"name": "goodput", ...}``, or the shorthand ``goodput:shape=chain3,accept_len=2.5``).

Inputs are `decode_bs`, `mean_ctx`, `accept_lens`, `accept_shape`, `shape` and the step_*
fields (identical on every TP/DP rank when the adapter reports the global step), so ranks agree.
State: the EMA, the depth counts, the calibration, streak counters, the mode-entry and last
RESHAPE iterations, and a per-(bs, ctx) prediction cache.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import TOWARD, Event, Mode
from specfsm.model.acceptance import (
    DraftShape,
    accept_length,
    alpha_from_accept_length,
    parse_shape,
    parse_shape_list,
    shape_text,
)
from specfsm.model.costs import (
    PLAIN_VARIANTS,
    PLAIN_WARM,
    PLAIN_ZERO_TAX,
    SHARED_REF,
    CostModel,
    CostTable,
    check_plain_variant,
    load_table,
    overlay_table,
)
from specfsm.policy.base import Hysteresis
from specfsm.policy.learn import DepthAcceptance, StepCalibration

#: Observation.step_kind values the calibration learns from (see the module docstring).
STEP_SPEC, STEP_PLAIN, STEP_WARM = "spec", "plain", "warm"


class GoodputPolicy(Hysteresis):
    """Pick the mode (and, with `shapes`, the draft shape) with the higher predicted goodput;
    hysteresis margin, debounce, dwell (see the module docstring)."""

    #: iterations between two refreshes of the shapes' predicted accept lengths
    accept_refresh = 16

    def __init__(
        self,
        cost: CostModel,
        accept_len: float,
        *,
        shapes: Sequence[DraftShape] = (),
        profile: CostTable | str | None = None,
        calibrate: bool = True,
        ema_alpha: float = 0.01,
        margin: float = 0.02,
        debounce: int = 4,
        min_dwell: int = 32,
        horizon: int = 64,
        lag_cap: int = 128,
        relax_half_life: int = 512,
        ctx_bucket: int = 256,
        plain: str = PLAIN_ZERO_TAX,
        shape_margin: float = 0.005,
        shape_debounce: int = 8,
        shape_dwell: int = 128,
        cal_ema: float = 0.1,
        depth_ema: float = 0.003,
        shape_z: float = 3.0,
        probe_z: float = 2.0,
        reprobe_after: int = 64,
        reprobe_max: int = 4,
        reprobe_len: int = 16,
        reprobe_evidence: int = 64,
        rho: float = 0.5,
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
        if margin < 0 or shape_margin < 0:
            raise ValueError(f"GoodputPolicy: margins must be >= 0: {margin}, {shape_margin}")
        if debounce < 1 or min_dwell < 0 or horizon < 1:
            raise ValueError("GoodputPolicy: need debounce >= 1, min_dwell >= 0, horizon >= 1")
        if shape_debounce < 1 or shape_dwell < 0:
            raise ValueError("GoodputPolicy: need shape_debounce >= 1, shape_dwell >= 0")
        if ctx_bucket < 1:
            raise ValueError(f"GoodputPolicy: ctx_bucket must be >= 1: {ctx_bucket}")
        if reprobe_after < 0 or reprobe_max < 0 or reprobe_len < 1 or reprobe_evidence < 0:
            raise ValueError(
                "GoodputPolicy: need reprobe_after >= 0, reprobe_max >= 0, reprobe_len >= 1, "
                "reprobe_evidence >= 0"
            )
        if relax_half_life < 0:
            raise ValueError(f"GoodputPolicy: relax_half_life must be >= 0: {relax_half_life}")
        if not 0.0 < cal_ema <= 1.0 or not 0.0 < depth_ema <= 1.0:
            raise ValueError(f"GoodputPolicy: cal_ema, depth_ema must be in (0, 1]: {cal_ema}")
        bad = [s for s in shapes if not isinstance(s, DraftShape)]
        if bad:
            raise ValueError(f"GoodputPolicy: shapes must be DraftShape, got {bad[0]!r}")
        super().__init__(debounce, min_dwell)
        self.cost = cost
        self.launch_shape = cost.shape
        self.profile = (
            None
            if profile is None
            else (profile if isinstance(profile, CostTable) else load_table(profile))
        )
        if self.profile is not None:
            table = overlay_table(cost.table, self.profile)
            ext = cost.extend if cost.extend in table.models else None
            self.prior: CostModel = CostModel(
                table, cost.shape, ctx=cost.ctx, target=cost.target, draft=cost.draft, extend=ext
            )
        else:
            self.prior = cost
        self.prior_accept_len = float(accept_len)
        self.ema_accept_len = float(accept_len)
        self.ema_alpha = ema_alpha
        self.margin = margin
        self.horizon = horizon
        self.lag_cap = lag_cap
        self.relax_half_life = relax_half_life
        self.ctx_bucket = ctx_bucket
        self.shape_margin = shape_margin
        self.shape_debounce = shape_debounce
        self.shape_dwell = shape_dwell
        self.shape_z = shape_z
        self.probe_z = probe_z
        self.reprobe_after = reprobe_after
        self.reprobe_max = reprobe_max
        self.reprobe_len = reprobe_len
        self.reprobe_evidence = reprobe_evidence
        self.rho = rho
        #: the table measures several context lengths: price each iteration at its mean_ctx
        self.ctx_aware = len(self.prior.contexts) > 1
        #: fraction of (prior - estimate) recovered per PLAIN iteration (0: never)
        self._relax = 1.0 - 0.5 ** (1.0 / relax_half_life) if relax_half_life else 0.0
        self.plain = plain
        self._off_kind = STEP_WARM if plain == PLAIN_WARM else STEP_PLAIN
        #: the shapes chosen among (the launch shape first when it was not listed); empty:
        #: on/off of the launch shape only
        self.shapes: tuple[DraftShape, ...] = tuple(dict.fromkeys(shapes))
        if self.shapes and cost.shape not in self.shapes:
            self.shapes = (cost.shape, *self.shapes)
        self._cands: tuple[DraftShape, ...] = self.shapes or (cost.shape,)
        self._index = {s: i for i, s in enumerate(self._cands)}
        self._cur = self._index[cost.shape]  # the machine's current shape (index)
        #: the shape a RESHAPE asks for (read by the machine)
        self.next_shape: DraftShape | None = None
        self.depth_ema = depth_ema
        self.depths = DepthAcceptance(
            alpha_from_accept_length(accept_len, cost.shape, rho),
            rho=rho,
            ema_alpha=depth_ema,
            relax_half_life=relax_half_life,
        )
        self.calibration: StepCalibration | None = (
            StepCalibration(ema=cal_ema) if calibrate else None
        )
        self._cal_seen = 0
        self._last_ctx = 0  # the mean_ctx of the previous iteration (the step measured now)
        # (bs, ctx bucket) -> (off ms, spec ms per candidate), corrected
        self._cache: dict[tuple[int, int], tuple[float, tuple[float, ...], tuple[float, ...]]] = {}
        self._prior_memo: dict[tuple[str, DraftShape | None, int, int], float] = {}
        self._weights: dict[int, float] = {}  # verifies in one iteration -> EMA weight
        self._acc: tuple[float, ...] = tuple(self.depths.accept_length(s) for s in self._cands)
        self._acc_version = self.depths.version
        self._dlog: tuple[float, ...] = (0.0,) * len(self._cands)
        self._alpha_sd = 0.0
        self._acc_at = -(10**9)
        self._shape_streak = 0
        self._shape_since = -(10**9)  # iteration of the last RESHAPE
        self._exploring = False  # the current shape was chosen before it was ever measured
        self._initial = False  # in the first mode, before the policy's first event
        self._probe = False  # SPECULATING entered for a shape never measured
        self._probe_shape: DraftShape | None = None  # that shape, until it is measured
        self._probe_plain = False  # PLAIN entered while it was never measured
        # re-probes from PLAIN (see the module docstring): how many since PLAIN was entered by
        # a decision (not a failed re-probe), the iteration from which the next may fire, the
        # shape a re-probe went for (until the machine runs it), and the iteration at which
        # the re-probe is judged on its point estimate (-1: not yet at the shape)
        self._reprobe_n = 0
        self._reprobe_at = 0
        self._reprobing = False
        self._reprobe_shape: DraftShape | None = None
        self._reprobe_end = -1
        self._spec_seen = 0  # SPECULATING iterations with verifies (the evidence)
        #: each candidate's accept length at the prior alpha (what a re-probe could find)
        self._acc_prior: tuple[float, ...] = tuple(
            accept_length(self.depths.prior_alpha, s, rho) for s in self._cands
        )

    # ------------------------------------------------------------------ costs
    def _bucket(self, ctx: int) -> int:
        """The context the costs are priced at: 0 (the configured one) unless the table is
        multi-context and `ctx` is known, else `ctx` rounded to a multiple of `ctx_bucket`."""
        if ctx <= 0 or not self.ctx_aware:
            return 0
        return CostModel.ctx_bucket_of(ctx, self.ctx_bucket)

    def _model(self, ctx: int) -> CostModel:
        """The prior cost model at context `ctx` (0: the configured one)."""
        b = self._bucket(ctx)
        return self.prior.at_ctx_bucket(b, self.ctx_bucket) if b else self.prior

    def _all_costs(
        self, bs: int, ctx: int = 0
    ) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
        """(PLAIN ms, speculative ms of each candidate shape, the same with a never-measured
        shape priced optimistically) at bs and ctx, corrected by the calibration; cached per
        (bs, ctx bucket) until a correction moves by more than its tolerance."""
        cal = self.calibration
        if cal is not None and cal.version != self._cal_seen:
            self._cache.clear()
            self._cal_seen = cal.version
        key = (bs, self._bucket(ctx))  # the same bucket the model below is priced at
        c = self._cache.get(key)
        if c is None:
            m = self._model(ctx)
            off = m.off_ms(bs, self.plain)
            spec = tuple(m.spec_ms(bs, s) for s in self._cands)
            opt = spec
            if cal is not None and cal.samples:
                off *= cal.factor(self._off_kind, None, bs)
                pairs = tuple(zip(spec, self._cands, strict=True))
                spec = tuple(ms * cal.factor(STEP_SPEC, s, bs) for ms, s in pairs)
                opt = tuple(ms * cal.factor(STEP_SPEC, s, bs, True) for ms, s in pairs)
            c = (off, spec, opt)
            if len(self._cache) < 65536:
                self._cache[key] = c
        return c

    def _costs(self, bs: int, ctx: int = 0) -> tuple[float, float]:
        """(PLAIN ms, speculative ms of the current shape) at bs and ctx."""
        off, spec, _ = self._all_costs(bs, ctx)
        return off, spec[self._cur]

    def _prior_ms(self, kind: str, shape: DraftShape | None, bs: int, ctx: int) -> float:
        key = (kind, shape, bs, self._bucket(ctx))
        v = self._prior_memo.get(key)
        if v is None:
            m = self._model(ctx)
            if kind == STEP_SPEC:
                v = m.spec_ms(bs, shape)
            elif kind == STEP_WARM:
                v = m.warm_ms(bs)
            else:
                v = m.zero_tax_ms(bs)
            if len(self._prior_memo) < 65536:
                self._prior_memo[key] = v
        return v

    def _calibrate(self, obs: Observation) -> None:
        """Fold the measured step of `obs` into the calibration (kinds spec, plain, warm)."""
        cal = self.calibration
        if cal is None:
            return
        kind = obs.step_kind
        if kind == STEP_SPEC:
            shape = obs.step_shape
            if shape is None:
                return
        elif kind in (STEP_PLAIN, STEP_WARM):
            shape = None
        else:
            return
        prior = self._prior_ms(kind, shape, obs.step_bs, self._last_ctx)
        if prior > 0.0:
            cal.observe(kind, shape, obs.step_bs, obs.step_ms / prior)

    def predicted_ms(self, bs: int, shape: DraftShape | None = None, ctx: int = 0) -> float:
        """The policy's current (calibrated) prediction of one step at bs: a speculative
        iteration of `shape` (one of the candidates), or PLAIN (None)."""
        off, spec, _ = self._all_costs(bs, ctx)
        if shape is None:
            return off
        i = self._index.get(shape)
        if i is None:
            raise ValueError(f"GoodputPolicy: {shape.label()} is not one of its shapes")
        return spec[i]

    # ------------------------------------------------------------------ acceptance
    def _accepts(self, iteration: int) -> tuple[float, ...]:
        """Each candidate's predicted accept length, refreshed at most every
        `accept_refresh` iterations (and only when the counts moved)."""
        d = self.depths
        if d.version != self._acc_version and iteration - self._acc_at >= self.accept_refresh:
            self._acc = tuple(d.accept_length(s) for s in self._cands)
            self._acc_version = d.version
            self._acc_at = iteration
            if self.shape_z > 0.0:
                a, h = d.alpha_fit(), 0.01
                lo, hi = max(0.0, a - h), min(1.0, a + h)
                self._dlog = tuple(
                    math.log(accept_length(hi, s, self.rho) / accept_length(lo, s, self.rho))
                    / (hi - lo)
                    for s in self._cands
                )
                self._alpha_sd = d.alpha_sd()
        return self._acc

    def _accepts_upper(self) -> tuple[float, ...]:
        """Each candidate's accept length at its upper bound (`probe_z` standard errors per
        depth, at most the prior's; `DepthAcceptance.accept_length_upper`)."""
        d = self.depths
        return tuple(d.accept_length_upper(s, self.probe_z) for s in self._cands)

    @staticmethod
    def _best(acc: Sequence[float], spec: Sequence[float], bs: int) -> tuple[int, float]:
        """(index, goodput) of the candidate with the highest bs x accept / ms."""
        ib, top = 0, -1.0
        for i, (a, ms) in enumerate(zip(acc, spec, strict=True)):
            g = a / ms
            if g > top:
                ib, top = i, g
        return ib, top * 1000.0 * bs

    def accept_lengths(self) -> dict[DraftShape, float]:
        """Every candidate shape's accept length as predicted now (from the counts)."""
        return {s: self.depths.accept_length(s) for s in self._cands}

    # ------------------------------------------------------------------ predictions
    def predict(
        self, bs: int, accept_len: float | None = None, ctx: int = 0
    ) -> tuple[float, float]:
        """(plain, spec) predicted output tokens/s at decode batch size bs and mean context ctx
        (0: the configured context; only a table with several contexts uses it), spec at the
        current shape (its learned accept length with shapes, else the accept-length EMA)."""
        if bs <= 0:
            return 0.0, 0.0
        if accept_len is not None:
            acc = accept_len
        elif self.shapes:
            acc = self.depths.accept_length(self._cands[self._cur])
        else:
            acc = self.ema_accept_len
        p_ms, s_ms = self._costs(bs, ctx)
        return 1000.0 * bs / p_ms, 1000.0 * bs * acc / s_ms

    def predict_shapes(self, bs: int, ctx: int = 0) -> dict[DraftShape | None, float]:
        """Predicted output tokens/s of PLAIN (key None) and of every candidate shape."""
        if bs <= 0:
            return {None: 0.0, **dict.fromkeys(self._cands, 0.0)}
        off, spec, _ = self._all_costs(bs, ctx)
        acc = self.accept_lengths()
        out: dict[DraftShape | None, float] = {None: 1000.0 * bs / off}
        for s, ms in zip(self._cands, spec, strict=True):
            out[s] = 1000.0 * bs * acc[s] / ms
        return out

    def best(self, bs: int, ctx: int = 0) -> DraftShape | None:
        """The shape with the highest predicted goodput at bs (None: PLAIN), no hysteresis."""
        tps = self.predict_shapes(max(1, bs), ctx)
        choice = max(tps, key=lambda s: tps[s])
        return choice

    # ------------------------------------------------------------------ deciding
    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        shapes = self.shapes
        if shapes and self._mode is None:  # the first mode was not chosen: no dwell in it
            self._mode, self._since = mode, obs.iteration - self.min_dwell
            self._initial = True
        self._seen(mode, obs.iteration)
        if shapes and obs.shape is not None:
            i = self._index.get(obs.shape)
            if i is not None:
                self._cur = i
        if mode is Mode.SPECULATING and obs.accept_lens:
            if shapes:
                self._spec_seen += 1
                a_shape = obs.accept_shape
                self.depths.observe(
                    a_shape if a_shape is not None else self._cands[self._cur], obs.accept_lens
                )
            else:
                n = len(obs.accept_lens)
                w = self._weights.get(n)
                if w is None:
                    w = self._weights[n] = 1.0 - (1.0 - self.ema_alpha) ** n
                mean = sum(obs.accept_lens) / n
                self.ema_accept_len += w * (mean - self.ema_accept_len)
        elif mode is Mode.PLAIN:
            if shapes:
                self.depths.relax()
            elif self.ema_accept_len < self.prior_accept_len:
                self.ema_accept_len += self._relax * (self.prior_accept_len - self.ema_accept_len)
        if obs.step_ms > 0.0 and obs.step_bs > 0:
            self._calibrate(obs)
        self._last_ctx = obs.mean_ctx
        if mode is Mode.DRAINING:
            return None
        bs = obs.decode_bs
        if bs <= 0:
            self._streak = 0
            self._shape_streak = 0
            return None
        if shapes:
            ev = self._decide_shapes(mode, obs, bs)
            if ev is not None:
                self._initial = False
            return ev
        ctx = obs.mean_ctx
        plain, spec = self.predict(bs, None, ctx)
        if mode is Mode.PLAIN:
            past = spec > plain * (1.0 + self.margin)
            if past and self.plain != PLAIN_WARM:
                p_ms, s_ms = self._costs(bs, ctx)
                past = self._catchup_pays(bs, ctx, obs.iteration, p_ms, s_ms, self.ema_accept_len)
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

    def _confirm(self, past: bool, mode: Mode, iteration: int) -> Event | None:
        cal = self.calibration
        if cal is not None and (self._probe or self._probe_plain):
            # a probe leaves only once it measured what it came for
            kind = STEP_SPEC if mode is not Mode.PLAIN else self._off_kind
            probing = (mode is not Mode.PLAIN and self._probe) or (
                mode is Mode.PLAIN and self._probe_plain
            )
            if probing and not cal.any_measured(kind):
                self._streak = 0
                return None
        # the first mode (not chosen by the policy), a SPECULATING entered for a shape never
        # measured or a PLAIN entered while never measured, which measured no better: no
        # debounce, no dwell
        if past and (
            self._initial
            or (self._probe and mode is not Mode.PLAIN)
            or (self._probe_plain and mode is Mode.PLAIN)
        ):
            self._streak = 0
            return TOWARD[(mode, Mode.SPECULATING if mode is Mode.PLAIN else Mode.PLAIN)]
        return super()._confirm(past, mode, iteration)

    def _catchup_pays(
        self, bs: int, ctx: int, iteration: int, p_ms: float, s_ms: float, acc: float
    ) -> bool:
        """Zero-tax PLAIN: the time speculation saves over `horizon` iterations pays for the
        RESYNCING catch-up of the lag PLAIN has built (at most `lag_cap` per request)."""
        lag = bs * min(self.lag_cap, max(1, iteration - self._since))
        saved = self.horizon * (p_ms - s_ms / acc)
        return saved > self._model(ctx).catchup_ms(bs, lag)

    def _decide_shapes(self, mode: Mode, obs: Observation, bs: int) -> Event | None:
        it = obs.iteration
        ctx = obs.mean_ctx
        off, spec, opt = self._all_costs(bs, ctx)
        acc = self._accepts(it)
        plain = 1000.0 * bs / off
        ib, top = 0, -1.0
        for i, (a, ms) in enumerate(zip(acc, spec, strict=True)):
            g = a / ms
            if g > top:
                ib, top = i, g
        top *= 1000.0 * bs
        cands = self._cands
        cal = self.calibration
        if mode is Mode.PLAIN:
            if opt is not spec and cal is not None:
                # a shape never measured on this engine (every shape, while speculation never
                # was) is priced optimistically: probe it once where that price says it may
                # beat PLAIN (it leaves again without dwell); a measured shape's price is its
                # own, so this is a bounded exploration (at most one probe per shape), which
                # an interpolated factor (too high on another model size) would never make
                ib, top = 0, -1.0
                for i, (a, ms) in enumerate(zip(acc, opt, strict=True)):
                    g = a / ms
                    if g > top:
                        ib, top = i, g
                top *= 1000.0 * bs
                spec = opt
            # a PLAIN entered as a probe, once measured, is left on the measurement alone (no
            # margin: exploring is not a decision to hedge); once it stays, it is resolved
            resolving = self._probe_plain and cal is not None and cal.measured(self._off_kind, None)
            margin = 0.0 if resolving else self.margin
            if resolving and self.probe_z > 0.0:
                # the shapes' accept lengths may rest on a few iterations of verifies: judge
                # the probe at their upper bound (`probe_z` standard errors, at most the prior)
                acc = self._accepts_upper()
                ib, top = self._best(acc, spec, bs)
            past = top > plain * (1.0 + margin)
            if past and self.plain != PLAIN_WARM:
                past = self._catchup_pays(bs, ctx, it, off, spec[ib], acc[ib])
            reprobe = False
            if (
                not past
                and not resolving
                and self.reprobe_after
                and self._reprobe_n < self.reprobe_max
                and it >= self._reprobe_at
                and self._spec_seen < self.reprobe_evidence
                and it - self._since >= self.min_dwell
            ):
                # the acceptance that keeps PLAIN rests on a few SPECULATING iterations: re-probe
                # (bounded, exponential back-off) where the prior's accept lengths say a shape
                # would beat PLAIN; it goes to the best shape at the upper bound
                # (checked every `accept_refresh` iterations; no debounce: the schedule is it)
                ip, topp = self._best(self._acc_prior, spec, bs)
                reprobe = topp > plain
                if reprobe and self.plain != PLAIN_WARM:
                    reprobe = self._catchup_pays(bs, ctx, it, off, spec[ip], self._acc_prior[ip])
                if reprobe:
                    acc_u = self._accepts_upper()
                    ib, top = self._best(acc_u, spec, bs)
                else:
                    self._reprobe_at = it + self.accept_refresh
            self._shape_streak = 0
            if reprobe:
                self._streak = 0
                ev: Event | None = Event.LOAD_LOW
            else:
                ev = self._confirm(past, mode, it)
            if ev is None and resolving:
                self._probe_plain = False
            if ev is not None:
                self._probe = cal is not None and not cal.measured(STEP_SPEC, cands[ib])
                self._probe_shape = cands[ib] if self._probe else None
                self._probe_plain = False
                self._reprobing = reprobe and not self._probe
                if self._reprobing:
                    self._reprobe_n += 1
                    self._reprobe_shape = cands[ib]
                    self._reprobe_end = -1
                    self.last_reason = (
                        f"goodput: re-probe {self._reprobe_n} of {cands[ib].label()} "
                        f"({self._spec_seen} SPECULATING iterations measured; {top:.0f} tok/s "
                        f"at the accept lengths' upper bound, plain {plain:.0f}) at bs={bs}, "
                        f"ctx={ctx}"
                    )
                else:
                    self.last_reason = (
                        f"goodput: {cands[ib].label()} {top:.0f} > plain {plain:.0f} tok/s "
                        f"x (1+{self.margin}) at bs={bs}, ctx={ctx}, accept_len={acc[ib]:.2f}"
                    )
            return ev
        cur = self._cur
        probe = self._probe_shape
        if probe is not None:
            # SPECULATING entered to probe a never-measured shape: the machine resumes at its
            # current shape, so go to the probed one at once and hold until it is measured
            # (else the probe would leave on the resumed shape's price, measuring nothing, and
            # PLAIN would ask for it again after every dwell)
            if cal is None or cal.measured(STEP_SPEC, probe):
                self._probe_shape = None
            elif mode is not Mode.SPECULATING or cands[cur] == probe:
                return None
            else:
                self._shape_since = it
                self._shape_streak = 0
                self._exploring = True
                self.next_shape = probe
                self._cur = self._index[probe]
                self.last_reason = f"goodput: probe {probe.label()} (never measured)"
                return Event.RESHAPE
        if self._reprobing:
            return self._decide_reprobe(mode, bs, ctx, it, plain, spec)
        now = 1000.0 * bs * acc[cur] / spec[cur]
        if (
            cal is not None
            and not cal.measured(self._off_kind, None)
            and cal.any_measured(STEP_SPEC)
        ):
            # PLAIN never measured on this engine, speculation was: probe PLAIN once where its
            # optimistic price (x (1 - probe_discount)) says it may pay
            plain /= 1.0 - cal.probe_discount
        # a SPECULATING entered as a probe, once its shape is measured, is left on the
        # measurement alone (no margin); once it stays, it is resolved
        resolving = self._probe and cal is not None and cal.measured(STEP_SPEC, cands[cur])
        if resolving and self.probe_z > 0.0:  # as in PLAIN: the accept lengths' upper bound
            acc_u = self._accepts_upper()
            past = (
                plain > 1000.0 * bs * acc_u[cur] / spec[cur]
                and plain >= self._best(acc_u, spec, bs)[1]
            )
        else:
            past = plain > now * (1.0 + (0.0 if resolving else self.margin)) and plain >= top
        ev = self._confirm(past, mode, it)
        if ev is None and resolving and mode is Mode.SPECULATING:
            self._probe = False
        if ev is not None:
            self._probe = False
            self._probe_shape = None
            self._probe_plain = cal is not None and not cal.measured(self._off_kind, None)
            self._shape_streak = 0
            self._plain_entered(it)
            self.last_reason = (
                f"goodput: plain {plain:.0f} > {cands[cur].label()} {now:.0f} tok/s "
                f"x (1+{self.margin}) at bs={bs}, ctx={ctx}, accept_len={acc[cur]:.2f}"
            )
            return ev
        if opt is not spec:  # the choice among shapes: never-measured shapes optimistic
            ib, top = cur, now
            for i, (a, ms) in enumerate(zip(acc, opt, strict=True)):
                g = 1000.0 * bs * a / ms
                if g > top:
                    ib, top = i, g
        resume = self._shape_since < self._since  # no RESHAPE yet since entering the mode
        need = self.shape_margin
        if self.shape_z > 0.0 and ib != cur and not resume and not self._exploring:
            # both predictions hang on the fitted alpha: its error moves their ratio by
            # d log(accept_b / accept_cur) / d alpha x sd(alpha) (not when leaving a shape
            # tried before it was ever measured: its measured cost answered the question)
            need += self.shape_z * abs(self._dlog[ib] - self._dlog[cur]) * self._alpha_sd
        if mode is not Mode.SPECULATING or ib == cur or top <= now * (1.0 + need):
            self._shape_streak = 0
            return None
        self._shape_streak += 1
        if resume or self._exploring:
            # the first shape change since (re-)entering SPECULATING, or leaving a shape tried
            # because it had never been measured: debounce only
            ready = self._shape_streak >= (1 if self._initial or self._exploring else self.debounce)
        else:
            ready = (
                self._shape_streak >= self.shape_debounce
                and it - self._shape_since >= self.shape_dwell
            )
        if not ready:
            return None
        self._shape_streak = 0
        self._shape_since = it
        new = cands[ib]
        cal = self.calibration
        self._exploring = cal is not None and not cal.measured(STEP_SPEC, new)
        self.last_reason = (
            f"goodput: {new.label()} {top:.0f} > {cands[cur].label()} {now:.0f} tok/s "
            f"x (1+{self.shape_margin}) at bs={bs}, ctx={ctx}, accept_len {acc[ib]:.2f} vs "
            f"{acc[cur]:.2f}"
        )
        self.next_shape = new
        self._cur = ib
        return Event.RESHAPE

    def _plain_entered(self, it: int) -> None:
        """LOAD_HIGH: after a failed re-probe the next waits `reprobe_after` x 2^n (n re-probes
        so far); after a decision to leave SPECULATING the count starts again."""
        if self._reprobing:
            self._reprobe_at = it + (self.reprobe_after << self._reprobe_n)
        else:
            self._reprobe_n = 0
            self._reprobe_at = it + self.reprobe_after
        self._reprobing = False
        self._reprobe_shape = None
        self._reprobe_end = -1

    def _decide_reprobe(
        self,
        mode: Mode,
        bs: int,
        ctx: int,
        it: int,
        plain: float,
        spec: Sequence[float],
    ) -> Event | None:
        """SPECULATING entered as a re-probe: go to its shape at once, measure it for
        `reprobe_len` iterations, then judge once, as a probe is judged: at the accept lengths'
        upper bound (`probe_z`), without margin (the counts still hold the old verifies that
        sent it to PLAIN); leave, or stay as an ordinary SPECULATING under the usual
        hysteresis. No earlier exit: until its verifies come in, the estimate is the old one."""
        cands, cur = self._cands, self._cur
        target = self._reprobe_shape
        self._shape_streak = 0
        if target is not None:
            if mode is not Mode.SPECULATING:
                return None
            if cands[cur] != target:
                self._shape_since = it
                self.next_shape = target
                self._cur = self._index[target]
                self.last_reason = f"goodput: re-probe goes to {target.label()}"
                return Event.RESHAPE
            self._reprobe_shape = None
            self._reprobe_end = it + self.reprobe_len
        if mode is not Mode.SPECULATING or it < self._reprobe_end:
            return None
        acc_u = self._accepts_upper()
        ib, top = self._best(acc_u, spec, bs)
        if plain <= top:  # it measured better: an ordinary SPECULATING from now on
            self._reprobing = False
            self._shape_since = it
            return None
        self._streak = 0
        self.last_reason = (
            f"goodput: re-probe {self._reprobe_n} measured no better: plain {plain:.0f} > "
            f"{cands[ib].label()} {top:.0f} tok/s (accept_len upper bound {acc_u[ib]:.2f}) at "
            f"bs={bs}, ctx={ctx}"
        )
        self._plain_entered(it)
        return TOWARD[(mode, Mode.PLAIN)]

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {
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
        if self.shapes:
            out.update(
                shapes=[shape_text(s) for s in self.shapes],
                shape_margin=self.shape_margin,
                shape_debounce=self.shape_debounce,
                shape_dwell=self.shape_dwell,
                probe_z=self.probe_z,
                reprobe_after=self.reprobe_after,
                reprobe_max=self.reprobe_max,
                reprobe_len=self.reprobe_len,
                reprobe_evidence=self.reprobe_evidence,
            )
        out["calibrate"] = self.calibration is not None
        if self.profile is not None:
            out["profile"] = self.profile.source
        return out


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
    "shape_margin": float,
    "shape_debounce": int,
    "shape_dwell": int,
    "cal_ema": float,
    "depth_ema": float,
    "shape_z": float,
    "probe_z": float,
    "reprobe_after": int,
    "reprobe_max": int,
    "reprobe_len": int,
    "reprobe_evidence": int,
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
    default PLAIN, or "warm": it must name the PLAIN the server runs), ``shape_margin``,
    ``shape_debounce``, ``shape_dwell``, ``cal_ema``, ``depth_ema``, ``shape_z``, ``probe_z``,
    ``reprobe_after``, ``reprobe_max``, ``reprobe_len``, ``reprobe_evidence``. ``shapes`` (a
    list of shapes, or one string "chain1,chain3,4,2,16"): choose among PLAIN and these per
    iteration (``shape`` is the launch shape, added when not listed). ``profile`` (a cost CSV in
    the packaged table format, e.g. the engine's start-up profile): its series override the
    table's as the calibration's prior. ``calibrate`` (bool, default true): refine the costs
    online from the measured step times. Raises ValueError with the reason on anything missing,
    unknown or invalid.
    """
    if not isinstance(args, Mapping):
        raise ValueError(f"goodput policy: expected an object, got {args!r}")
    known = {"table", "shape", "ctx", "accept_len", "shapes", "profile", "calibrate", *_KEYWORDS}
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
    shapes: tuple[DraftShape, ...] = ()
    if "shapes" in args:
        try:
            shapes = parse_shape_list(args["shapes"])
        except ValueError as exc:
            raise ValueError(f"goodput policy: shapes: {exc}") from None
    calibrate = args.get("calibrate", True)
    if not isinstance(calibrate, bool):
        raise ValueError(f"goodput policy: calibrate must be true or false, got {calibrate!r}")
    profile: CostTable | None = None
    if "profile" in args:
        name = args["profile"]
        if not isinstance(name, str) or not name:
            raise ValueError(f"goodput policy: profile must be a path or a name, got {name!r}")
        try:
            profile = load_table(name)
            CostModel(overlay_table(table, profile), shape, ctx=ctx).spec_ms(1)
        except (OSError, KeyError, ValueError) as exc:
            raise ValueError(f"goodput policy: cannot use profile {name!r}: {exc}") from exc
    try:
        for s in shapes:
            cost.spec_ms(1, s)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"goodput policy: cannot price shapes on {table_name!r}: {exc}") from exc
    return GoodputPolicy(
        cost, accept_len, shapes=shapes, profile=profile, calibrate=calibrate, **kwargs
    )
