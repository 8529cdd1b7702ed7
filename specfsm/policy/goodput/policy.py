"""GoodputPolicy: speculate when the cost model predicts more accepted tokens per second.

Each iteration, at the observed decode batch size bs and mean context:

    goodput(PLAIN) = bs / off_ms(bs),   goodput(s) = bs * accept(s) / spec_ms(bs, s)

for PLAIN and every candidate shape s (with ``shapes``; else the launch shape alone, at the
accept-length EMA). The job is cut in four: `GoodputParams` (the numbers), `Estimator` (what
was learned: costs and acceptance, `estimate` giving every option's prediction), the
objective (pure functions: goodput, the best option, margins, whether a catch-up pays) and the
`Ledger` (hysteresis, probes, re-probes); the ordered `rules` turn them into a `Verdict` (the
event, the rule, its numbers), which the machine applies and logs.

Inputs are `decode_bs`, `mean_ctx`, `accept_lens`, `accept_shape`, `shape` and the step_*
fields (identical on every TP/DP rank when the adapter reports the global step), so ranks
agree. The current shape is Observation.shape (the machine's) when given, else the policy's
record.
"""

from __future__ import annotations

from collections.abc import Sequence

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode
from specfsm.fsm.verdict import Verdict
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import CostModel, CostTable, load_table
from specfsm.policy.goodput.estimator import Estimator
from specfsm.policy.goodput.ledger import Ledger
from specfsm.policy.goodput.objective import tok_s
from specfsm.policy.goodput.params import GoodputParams
from specfsm.policy.goodput.rules import HOLD, ONOFF_RULES, SHAPE_RULES
from specfsm.policy.learn import DepthAcceptance, StepCalibration

_DRAINING = Mode.DRAINING


class GoodputPolicy:
    """Pick the mode (and, with `shapes`, the draft shape) with the higher predicted goodput
    (see the module docstring and `specfsm.policy.goodput.rules`)."""

    def __init__(
        self,
        cost: CostModel,
        accept_len: float,
        *,
        shapes: Sequence[DraftShape] = (),
        profile: CostTable | str | None = None,
        calibrate: bool = True,
        **params: object,
    ) -> None:
        self.params = GoodputParams(
            accept_len=accept_len,
            shapes=tuple(shapes),
            calibrate=calibrate,
            **params,  # type: ignore[arg-type]
        )
        prof = profile if profile is None or isinstance(profile, CostTable) else load_table(profile)
        self.est = Estimator(cost, self.params, prof)
        p = self.params
        self.ledger = Ledger(
            p.debounce,
            p.min_dwell,
            margin=p.margin,
            max_margin=p.max_margin,
            reversal_window=p.reversal_window,
            prefill_debounce=p.prefill_debounce,
        )
        self.cur = self.est.index[cost.shape]  # the machine's current shape (index)
        self._rules = SHAPE_RULES if self.est.shapes else ONOFF_RULES
        #: it learns from Observation.step_ms (the calibration, the prefill pressure's decode
        #: time): an adapter with several ranks gives them one value, so that they decide alike
        self.uses_step_ms = p.calibrate or p.prefill_ms_per_token > 0.0
        #: it decides before prefill forwards too (Observation.prefill_tokens > 0): a burst
        #: that arrives while SPECULATING is priced before its prompts' prefill
        self.sees_prefills = p.prefills
        #: the last verdict's reason and RESHAPE shape (for callers that read them)
        self.last_reason = ""
        self.next_shape: DraftShape | None = None
        self.last_verdict: Verdict | None = None

    # ------------------------------------------------------------------ the public surface
    @property
    def cost(self) -> CostModel:
        return self.est.cost

    @property
    def prior(self) -> CostModel:
        return self.est.prior

    @property
    def profile(self) -> CostTable | None:
        return self.est.profile

    @property
    def launch_shape(self) -> DraftShape:
        return self.est.cost.shape

    @property
    def shapes(self) -> tuple[DraftShape, ...]:
        """The shapes chosen among (the launch shape first when it was not listed); empty:
        on/off of the launch shape."""
        return self.est.shapes

    @property
    def calibration(self) -> StepCalibration | None:
        return self.est.calibration

    @property
    def depths(self) -> DepthAcceptance:
        return self.est.depths

    @property
    def plain(self) -> str:
        return self.params.plain

    @property
    def margin(self) -> float:
        return self.params.margin

    @property
    def debounce(self) -> int:
        return self.params.debounce

    @property
    def min_dwell(self) -> int:
        return self.params.min_dwell

    @property
    def reprobe_after(self) -> int:
        return self.params.reprobe_after

    @property
    def reprobe_max(self) -> int:
        return self.params.reprobe_max

    @property
    def ctx_aware(self) -> bool:
        return self.est.ctx_aware

    @property
    def prior_accept_len(self) -> float:
        return self.est.prior_accept_len

    @property
    def ema_accept_len(self) -> float:
        """The on/off policy's accept-length estimate (settable: a known starting point)."""
        return self.est.ema_accept_len

    @ema_accept_len.setter
    def ema_accept_len(self, value: float) -> None:
        self.est.ema_accept_len = float(value)

    def predicted_ms(self, bs: int, shape: DraftShape | None = None, ctx: int = 0) -> float:
        """The current (calibrated) prediction of one step at bs: a speculative iteration of
        `shape` (one of the candidates), or PLAIN (None)."""
        off, spec, _ = self.est.costs(bs, ctx)
        if shape is None:
            return off
        i = self.est.index.get(shape)
        if i is None:
            raise ValueError(f"GoodputPolicy: {shape.label()} is not one of its shapes")
        return spec[i]

    def accept_lengths(self) -> dict[DraftShape, float]:
        return self.est.accept_lengths()

    def predict(
        self, bs: int, accept_len: float | None = None, ctx: int = 0
    ) -> tuple[float, float]:
        """(plain, spec) predicted output tokens/s at bs and ctx, spec at the current shape
        (its learned accept length with shapes, else the accept-length EMA)."""
        if bs <= 0:
            return 0.0, 0.0
        est = self.est
        if accept_len is not None:
            acc = accept_len
        elif est.shapes:
            acc = est.depths.accept_length(est.cands[self.cur])
        else:
            acc = est.ema_accept_len
        off, spec, _ = est.costs(bs, ctx)
        return 1000.0 * bs / off, 1000.0 * bs * acc / spec[self.cur]

    def predict_shapes(self, bs: int, ctx: int = 0) -> dict[DraftShape | None, float]:
        """Predicted output tokens/s of PLAIN (key None) and of every candidate shape."""
        est = self.est
        if bs <= 0:
            return {None: 0.0, **dict.fromkeys(est.cands, 0.0)}
        off, spec, _ = est.costs(bs, ctx)
        acc = est.accept_lengths()
        out: dict[DraftShape | None, float] = {None: 1000.0 * bs / off}
        for s, ms in zip(est.cands, spec, strict=True):
            out[s] = 1000.0 * bs * acc[s] / ms
        return out

    def best(self, bs: int, ctx: int = 0) -> DraftShape | None:
        """The shape with the highest predicted goodput at bs (None: PLAIN), no hysteresis."""
        tps = self.predict_shapes(max(1, bs), ctx)
        return max(tps, key=lambda s: tps[s])

    # ------------------------------------------------------------------ deciding
    def decide(self, mode: Mode, obs: Observation) -> Verdict | None:
        est, ledger = self.est, self.ledger
        it = obs.iteration
        if est.shapes:
            ledger.first_seen(mode, it)
        ledger.seen(mode, it)
        if est.shapes and obs.shape is not None:
            i = est.index.get(obs.shape)
            if i is not None:
                self.cur = i
        est.learn(mode, obs, self.cur)
        if obs.prefill_tokens and self.params.prefill_ms_per_token > 0.0:
            # a prefill chunk of 8192 tokens is ~20 decode steps of GPU time: counted so, it
            # lets a burst end a mode's dwell in a few chunks, not in `min_dwell` of them
            ledger.credit(est.prefill_steps(obs))
        if mode is _DRAINING:
            return None
        bs = obs.decode_bs
        if bs <= 0:
            ledger.idle()
            return None
        if self.params.price_queued and obs.queued:
            # the waiting requests join the batch as their prefills finish: a burst is priced
            # at the batch it brings (PLAIN before its prefills, which then skip the draft's)
            bs = min(bs + int(self.params.price_queued * obs.queued), max(bs, est.max_bs))
        e = est.estimate(bs, obs.mean_ctx, it)
        for rule in self._rules[mode]:
            out = rule(self, e, ledger, mode, obs)
            if out is None:
                continue
            if out is HOLD:
                return None
            assert isinstance(out, Verdict)
            ledger.initial = False
            if out.event is Event.LOAD_HIGH or out.event is Event.LOAD_LOW:
                ledger.load_switched(it)
            self.last_verdict = out
            self.last_reason = out.reason
            if out.shape is not None:
                self.next_shape = out.shape
            return out
        return None

    def view(self, obs: Observation) -> dict[str, object]:
        """What it believes at `obs`'s batch and context, for the sampled observation line:
        PLAIN's and each shape's calibrated step (ms), accept length and tokens/s, the
        calibration's factors there, the prefill share and pressure, the margin a switch
        needs now. Read-only (its caches aside), so logging it changes no decision."""
        est, bs, it = self.est, max(1, obs.decode_bs), obs.iteration
        off, spec, _ = est.costs(bs, obs.mean_ctx)
        acc = est.accept_lengths() if est.shapes else {est.cands[self.cur]: est.ema_accept_len}
        out: dict[str, object] = {"bs": bs, "plain_ms": round(off, 3)}
        out["plain_tok_s"] = round(tok_s(bs, 1.0, off), 1)
        for s, ms in zip(est.cands, spec, strict=True):
            if s in acc:
                out[s.label()] = {
                    "ms": round(ms, 3),
                    "accept_len": round(acc[s], 3),
                    "tok_s": round(tok_s(bs, acc[s], ms * est.pressure_factor()), 1),
                }
        cal = est.calibration
        if cal is not None:
            out["calibration"] = {
                str(est.off_kind): round(cal.factor(est.off_kind, None, bs), 3),
                **{s.label(): round(cal.factor("spec", s, bs), 3) for s in est.cands if s in acc},
            }
        if self.params.prefill_ms_per_token > 0.0:
            out["prefill_share"] = round(est.share, 3)
            out["pressure"] = round(est.pressure_factor(), 3)
        out["margin"] = self.ledger.margin(it)
        return out

    def describe(self) -> dict[str, object]:
        """The policy's name, every parameter, the cost model and the profile's source."""
        return {"policy": "goodput", **self.params.describe(), **self.est.describe()}
