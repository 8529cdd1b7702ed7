"""What the goodput policy has learned, and what it predicts from it.

Learned state only: the prior (the cost table, with the engine's start-up profile laid over
it), the calibration of each step kind against it (`StepCalibration`), the per-depth
acceptance counts (`DepthAcceptance`, choosing among shapes) or the accept-length EMA (on/off
of the launch shape), and the caches that keep an iteration to a few dict lookups.

Costs: spec_ms / off_ms are the prior x the calibration's factor (a shape never measured
borrows the smallest measured factor, so it gets tried rather than ruled out on another
shape's factor; PLAIN never measured keeps the prior). Cached per (bs, ctx bucket); the cache
is dropped only when a correction moved by more than its tolerance. With a table of several
context lengths every price is taken at the iteration's mean context, bucketed by
`ctx_bucket` tokens (on an H200 the crossover of a chain of 3 against zero-tax PLAIN is bs 28
at 1024 tokens and 10 at 4096: one context-blind setting is wrong by ~3x somewhere).

Acceptance: the EMA weighs verified requests, not iterations (`ema_alpha` per verify: an
iteration of n verifies moves it by 1 - (1 - ema_alpha)^n of the way to their mean), so at bs
1 it averages ~1/ema_alpha verifies and at bs 64 follows a change within a few iterations. In
PLAIN nothing is verified, so an estimate below the prior relaxes back toward it (half-life
`relax_half_life` PLAIN iterations): a low stretch that tipped the policy into PLAIN at low
load would otherwise keep it there for good. Predicted accept lengths refresh every
`accept_refresh` iterations.

Prefill pressure (with `prefill_ms_per_token` > 0): arrivals make SGLang run prefills between
decodes, and a prefill on a speculative server costs more than on PLAIN, which defers the
draft's prefill (the draft's share of it, and the host waiting for it before the next batch:
`prefill_extra` of the target's time). The decode price alone misses it: on the H200 a burst
at 40 requests/s left decode a few percent of the GPU, and a policy that went back to
SPECULATING at bs 41 on a 4.5% better decode price served a third of the no-spec server's
tokens in that phase. So the estimator keeps `share`, the prefills' fraction of recent GPU
time (an average per observation, weight `prefill_ema`, of the prompt tokens x
`prefill_ms_per_token` against the measured decode steps), and prices every speculative
option on the time left to decode: its cost x (1 - share) / (1 - share x (1 + prefill_extra)),
PLAIN's unchanged. A ratio of the two modes' time left, so a quiet GPU (share ~0) prices as
before.

`estimate(bs, ctx, iteration)` returns one `Estimate`: every option's predicted cost and accept
length now, from which the rules read each option's tokens/s at the bound they judge by.
"""

from __future__ import annotations

import math

from specfsm.fsm.kinds import StepKind
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape, accept_length, alpha_from_accept_length
from specfsm.model.costs import CostModel, CostTable, overlay_table
from specfsm.policy.goodput.objective import tok_s
from specfsm.policy.goodput.params import GoodputParams
from specfsm.policy.learn import DepthAcceptance, StepCalibration

_SPEC = StepKind.SPEC
_PLAIN = StepKind.PLAIN
_WARM = StepKind.WARM
_Costs = tuple[float, tuple[float, ...], tuple[float, ...]]
#: the most a prefill share can lengthen a speculative option (its time left to decode is
#: then ~nothing: any finite price past this ranks it last all the same)
MAX_PRESSURE = 1000.0


class Estimate:
    """Every option's prediction at one iteration: PLAIN's cost `off_ms` and goodput `plain`;
    per candidate shape its calibrated cost `spec_ms`, the same with never-measured shapes
    priced optimistically `opt_ms` (the very tuple `spec_ms` when nothing is optimistic) and
    its accept length `acc`; `upper()` the accept lengths at their upper bound."""

    __slots__ = ("_upper", "acc", "bs", "ctx", "est", "off_ms", "opt_ms", "plain", "spec_ms")

    def __init__(
        self,
        est: Estimator,
        bs: int,
        ctx: int,
        costs: _Costs,
        acc: tuple[float, ...],
    ) -> None:
        self.est = est
        self.bs = bs
        self.ctx = ctx
        self.off_ms, self.spec_ms, self.opt_ms = costs
        self.plain = 1000.0 * bs / self.off_ms
        self.acc = acc
        self._upper: tuple[float, ...] | None = None

    def upper(self) -> tuple[float, ...]:
        """Each candidate's accept length at its upper bound (`probe_z` standard errors per
        depth, at most the prior's; `DepthAcceptance.accept_length_upper`)."""
        if self._upper is None:
            self._upper = self.est.accepts_upper()
        return self._upper

    def tok_s(
        self, i: int, acc: tuple[float, ...] | None = None, ms: tuple[float, ...] | None = None
    ) -> float:
        a = self.acc if acc is None else acc
        m = self.spec_ms if ms is None else ms
        return tok_s(self.bs, a[i], m[i])

    def predicted(
        self, acc: tuple[float, ...], ms: tuple[float, ...], plain: float | None = None
    ) -> tuple[tuple[str, float], ...]:
        """Every option's tokens/s (PLAIN as "plain", shapes by label) under `acc` and `ms`."""
        first = ("plain", self.plain if plain is None else plain)
        cands = self.est.cands
        return (
            first,
            *((s.label(), tok_s(self.bs, a, m)) for s, a, m in zip(cands, acc, ms, strict=True)),
        )


class Estimator:
    """The learned state of one goodput policy (see the module docstring)."""

    #: iterations between two refreshes of the shapes' predicted accept lengths
    accept_refresh = 16

    def __init__(self, cost: CostModel, params: GoodputParams, profile: CostTable | None) -> None:
        p = self.params = params
        self.cost = cost
        self.profile = profile
        if profile is not None:
            table = overlay_table(cost.table, profile)
            ext = cost.extend if cost.extend in table.models else None
            self.prior: CostModel = CostModel(
                table, cost.shape, ctx=cost.ctx, target=cost.target, draft=cost.draft, extend=ext
            )
        else:
            self.prior = cost
        #: the largest batch the prior measures (a priced batch stops there)
        self.max_bs = max(self.prior.table.batch_sizes(self.prior.target))
        #: the table measures several context lengths: price each iteration at its mean_ctx
        self.ctx_aware = len(self.prior.contexts) > 1
        self.off_kind = p.plain.off_step
        #: the shapes chosen among (the launch shape first when it was not listed); one
        #: candidate, the launch shape, for the on/off policy
        self.shapes: tuple[DraftShape, ...] = p.shapes
        if self.shapes and cost.shape not in self.shapes:
            self.shapes = (cost.shape, *self.shapes)
        self.cands: tuple[DraftShape, ...] = self.shapes or (cost.shape,)
        self.index = {s: i for i, s in enumerate(self.cands)}
        self.prior_accept_len = float(p.accept_len)
        self.ema_accept_len = float(p.accept_len)
        #: fraction of (prior - estimate) recovered per PLAIN iteration (0: never)
        hl = p.relax_half_life
        self._relax = 1.0 - 0.5 ** (1.0 / hl) if hl else 0.0
        self.depths = DepthAcceptance(
            alpha_from_accept_length(p.accept_len, cost.shape, p.rho),
            rho=p.rho,
            ema_alpha=p.depth_ema,
            relax_half_life=hl,
        )
        self.calibration: StepCalibration | None = (
            StepCalibration(ema=p.cal_ema, clip=p.cal_clip) if p.calibrate else None
        )
        self._cal_seen = 0
        self._last_ctx = 0  # the mean_ctx of the previous iteration (the step measured now)
        self._cache: dict[tuple[int, int], _Costs] = {}
        self._prior_memo: dict[tuple[str, DraftShape | None, int, int], float] = {}
        self._weights: dict[int, float] = {}  # verifies in one iteration -> EMA weight
        self._acc: tuple[float, ...] = tuple(self.depths.accept_length(s) for s in self.cands)
        self._acc_version = self.depths.version
        self._acc_at = -(10**9)
        #: d log(accept_len) / d alpha per candidate, and the standard error of alpha
        self.dlog: tuple[float, ...] = (0.0,) * len(self.cands)
        self.alpha_sd = 0.0
        #: SPECULATING iterations with verifies (the evidence acceptance rests on)
        self.spec_seen = 0
        #: averages of the prefill and decode time per observation (ms), and the prefills'
        #: share of it (prefill pressure; 0 with it off)
        self._pf_ms = 0.0
        self._dec_ms = 0.0
        self.share = 0.0
        #: average of the measured decode steps alone (ms; 0 until one is measured)
        self.step_ms = 0.0
        #: each candidate's accept length at the prior alpha (what a re-probe could find)
        self.acc_prior: tuple[float, ...] = tuple(
            accept_length(self.depths.prior_alpha, s, p.rho) for s in self.cands
        )

    # ------------------------------------------------------------------ learning
    def learn(self, mode: Mode, obs: Observation, cur: int) -> None:
        """Fold one iteration in: its verifies (while SPECULATING), the relaxation (in PLAIN),
        and its measured step. A prefill observation teaches only the prefill pressure (no
        verify, no step)."""
        if self.params.prefill_ms_per_token > 0.0:
            self._pressure(obs)
        if obs.prefill_tokens:
            return
        if mode is Mode.SPECULATING and obs.accept_lens:
            if self.shapes:
                self.spec_seen += 1
                a_shape = obs.accept_shape
                self.depths.observe(
                    a_shape if a_shape is not None else self.cands[cur], obs.accept_lens
                )
            else:
                n = len(obs.accept_lens)
                w = self._weights.get(n)
                if w is None:
                    w = self._weights[n] = 1.0 - (1.0 - self.params.ema_alpha) ** n
                mean = sum(obs.accept_lens) / n
                self.ema_accept_len += w * (mean - self.ema_accept_len)
        elif mode is Mode.PLAIN:
            if self.shapes:
                self.depths.relax()
            elif self.ema_accept_len < self.prior_accept_len:
                self.ema_accept_len += self._relax * (self.prior_accept_len - self.ema_accept_len)
        if obs.step_ms > 0.0 and obs.step_bs > 0:
            self._calibrate(obs)
        self._last_ctx = obs.mean_ctx

    def _pressure(self, obs: Observation) -> None:
        """Fold one observation into the prefill and decode time averages: a prefill's prompt
        tokens at `prefill_ms_per_token`, a decode's measured step (a decode not measured yet
        leaves both averages)."""
        p = self.params
        if obs.prefill_tokens:
            pf, dec = obs.prefill_tokens * p.prefill_ms_per_token, 0.0
        elif obs.step_ms > 0.0:
            pf, dec = 0.0, obs.step_ms
        else:
            return
        a = p.prefill_ema
        if dec > 0.0:
            self.step_ms = dec if self.step_ms <= 0.0 else self.step_ms + a * (dec - self.step_ms)
        self._pf_ms += a * (pf - self._pf_ms)
        self._dec_ms += a * (dec - self._dec_ms)
        total = self._pf_ms + self._dec_ms
        self.share = self._pf_ms / total if total > 0.0 else 0.0

    def prefill_steps(self, obs: Observation) -> float:
        """The decode steps' worth of time a prefill observation took beyond one step (0 with
        the pressure off, on a decode, or before any decode step was measured)."""
        if not obs.prefill_tokens or self.step_ms <= 0.0:
            return 0.0
        steps = obs.prefill_tokens * self.params.prefill_ms_per_token / self.step_ms
        return steps - 1.0 if steps > 1.0 else 0.0

    def pressure_factor(self) -> float:
        """How much longer a speculative option's decode takes per unit of served time under
        the current prefill share (1.0: no pressure; at most `MAX_PRESSURE`)."""
        f = self.share
        if f <= 0.0:
            return 1.0
        left_plain = 1.0 - f
        left_spec = 1.0 - f * (1.0 + self.params.prefill_extra)
        if left_spec <= left_plain / MAX_PRESSURE:
            return MAX_PRESSURE
        return left_plain / left_spec

    def _calibrate(self, obs: Observation) -> None:
        """Fold the measured step of `obs` into the calibration (kinds spec, plain, warm; a
        RESYNCING step is not learned from: its catch-up depends on the lag)."""
        cal = self.calibration
        if cal is None:
            return
        kind = obs.step_kind
        if kind == _SPEC:
            shape = obs.step_shape
            if shape is None:
                return
        elif kind in (_PLAIN, _WARM):
            shape = None
        else:
            return
        prior = self._prior_ms(kind, shape, obs.step_bs, self._last_ctx)
        if prior > 0.0:
            cal.observe(kind, shape, obs.step_bs, obs.step_ms / prior)

    def measured(self, kind: str, shape: DraftShape | None) -> bool:
        """The calibration measured (kind, shape); True without a calibration (nothing to
        probe)."""
        cal = self.calibration
        return cal is None or cal.measured(kind, shape)

    # ------------------------------------------------------------------ costs
    def bucket(self, ctx: int) -> int:
        """The context the costs are priced at: 0 (the configured one) unless the table is
        multi-context and `ctx` is known, else `ctx` rounded to a multiple of `ctx_bucket`."""
        if ctx <= 0 or not self.ctx_aware:
            return 0
        return CostModel.ctx_bucket_of(ctx, self.params.ctx_bucket)

    def model(self, ctx: int) -> CostModel:
        """The prior cost model at context `ctx` (0: the configured one)."""
        b = self.bucket(ctx)
        return self.prior.at_ctx_bucket(b, self.params.ctx_bucket) if b else self.prior

    def costs(self, bs: int, ctx: int = 0) -> _Costs:
        """(PLAIN ms, speculative ms of each candidate, the same with never-measured shapes
        priced optimistically) at bs and ctx, corrected by the calibration."""
        cal = self.calibration
        if cal is not None and cal.version != self._cal_seen:
            self._cache.clear()
            self._cal_seen = cal.version
        key = (bs, self.bucket(ctx))  # the same bucket the model below is priced at
        c = self._cache.get(key)
        if c is None:
            m = self.model(ctx)
            off = m.off_ms(bs, self.params.plain)
            spec = tuple(m.spec_ms(bs, s) for s in self.cands)
            opt = spec
            if cal is not None and cal.samples:
                off *= cal.factor(self.off_kind, None, bs)
                pairs = tuple(zip(spec, self.cands, strict=True))
                spec = tuple(ms * cal.factor(_SPEC, s, bs) for ms, s in pairs)
                opt = tuple(ms * cal.factor(_SPEC, s, bs, True) for ms, s in pairs)
            c = (off, spec, opt)
            if len(self._cache) < 65536:
                self._cache[key] = c
        return c

    def _prior_ms(self, kind: str, shape: DraftShape | None, bs: int, ctx: int) -> float:
        key = (kind, shape, bs, self.bucket(ctx))
        v = self._prior_memo.get(key)
        if v is None:
            m = self.model(ctx)
            if kind == _SPEC:
                v = m.spec_ms(bs, shape)
            elif kind == _WARM:
                v = m.warm_ms(bs)
            else:
                v = m.zero_tax_ms(bs)
            if len(self._prior_memo) < 65536:
                self._prior_memo[key] = v
        return v

    def catchup_ms(self, bs: int, ctx: int, lag: int) -> float:
        return self.model(ctx).catchup_ms(bs, lag)

    # ------------------------------------------------------------------ acceptance
    def accepts(self, iteration: int) -> tuple[float, ...]:
        """Each candidate's predicted accept length, refreshed at most every
        `accept_refresh` iterations (and only when the counts moved)."""
        d = self.depths
        if d.version != self._acc_version and iteration - self._acc_at >= self.accept_refresh:
            self._acc = tuple(d.accept_length(s) for s in self.cands)
            self._acc_version = d.version
            self._acc_at = iteration
            if self.params.shape_z > 0.0:
                rho = self.params.rho
                a, h = d.alpha_fit(), 0.01
                lo, hi = max(0.0, a - h), min(1.0, a + h)
                self.dlog = tuple(
                    math.log(accept_length(hi, s, rho) / accept_length(lo, s, rho)) / (hi - lo)
                    for s in self.cands
                )
                self.alpha_sd = d.alpha_sd()
        return self._acc

    def accepts_upper(self) -> tuple[float, ...]:
        d, z = self.depths, self.params.probe_z
        return tuple(d.accept_length_upper(s, z) for s in self.cands)

    def estimate(self, bs: int, ctx: int, iteration: int) -> Estimate:
        """Every option's prediction now (the shapes' accept lengths from the counts)."""
        costs = self.costs(bs, ctx)
        k = self.pressure_factor()
        if k != 1.0:
            off, spec, opt = costs
            spec_k = tuple(ms * k for ms in spec)
            costs = (off, spec_k, spec_k if opt is spec else tuple(ms * k for ms in opt))
        return Estimate(self, bs, ctx, costs, self.accepts(iteration))

    def accept_lengths(self) -> dict[DraftShape, float]:
        """Every candidate shape's accept length as predicted now (from the counts)."""
        return {s: self.depths.accept_length(s) for s in self.cands}

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"ctx_aware": self.ctx_aware, "cost": self.cost.describe()}
        if self.profile is not None:
            out["profile"] = self.profile.source
        return out
