"""The goodput policy's rules, in the order they are asked; the first verdict wins.

Each rule is ``(ctx, estimate, ledger, mode, obs) -> Verdict | HOLD | None``: a Verdict (an
event, with its numbers), HOLD (the rule claims the iteration and nothing is due: later rules
are not asked), or None (the next rule is asked). `ctx` is the policy, seen as a
`RuleContext` (its parameters, its estimator, its ledger, the current shape's index `cur`).

In PLAIN:

* ``speculate``: LOAD_LOW when the best shape beats PLAIN by `margin` and, with zero-tax PLAIN,
  the time saved over `horizon` iterations pays the catch-up; a shape never measured on this
  engine is priced optimistically here (the calibration's `probe_discount` below the smallest
  measured factor): a bounded exploration, at most one probe per shape, that an interpolated
  factor (too high on another model size) would never make. A PLAIN entered as a probe
  (``probe-resolved``), once measured, is judged without margin at the accept lengths' upper
  bound (`probe_z` standard errors per depth, never above the prior): the start-up probes
  leave a few iterations of verifies, and a chain1 judged 2.6 standard errors low there kept
  PLAIN for ~4000 iterations where chain1 wins by less than `margin`.
* ``reprobe``: while fewer than `reprobe_evidence` SPECULATING iterations were ever measured
  (acceptance is correlated within a request and drifts with the prompts: a few iterations of
  a large batch are fewer independent samples than their verifies count), where the prior's
  accept lengths say a shape would beat PLAIN (with the catch-up check), re-probe the best
  shape at the upper bound, `reprobe_after` iterations after PLAIN was entered, then
  `reprobe_after` x 2^n after the n-th failed one, at most `reprobe_max` per PLAIN entered
  by a decision: at most 2 x `reprobe_max` switches per PLAIN stay.

In SPECULATING and RESYNCING:

* ``probe-shape``: SPECULATING entered to probe a never-measured shape resumes at the
  machine's shape: go to the probed one at once and hold until it is measured (else the probe
  would leave on the resumed shape's price, measuring nothing, and PLAIN would ask again).
* ``reprobe-shape`` / ``reprobe-failed``: a re-probe goes to its shape at once, measures it
  for `reprobe_len` iterations and is judged once at the upper bound without margin (the
  counts still hold the old verifies that sent it to PLAIN): back to PLAIN, or an ordinary
  SPECULATING from then on. No earlier exit: until its verifies come in, the estimate is old.
* ``plain``: LOAD_HIGH when PLAIN beats the current shape by `margin` and every shape (PLAIN
  never measured on this engine is priced optimistically: one probe of PLAIN; a probe, once
  measured, is judged at the upper bound without margin: ``probe-measured``).
* ``reshape``: RESHAPE when the best shape beats the current one by `shape_margin` +
  `shape_z` standard errors of their predicted ratio (both accept lengths hang on the fitted
  alpha; `shape_z` is 3: the binomial sd of alpha understates the error of a deep depth
  extrapolated from it, and at 1 the policy left chain1 for chain7 at ctx 4096, alpha 0.8, 32
  requests on a 3 % predicted gain that measured 0.3 % worse) for `shape_debounce`
  iterations and `shape_dwell` iterations after the last RESHAPE. The first RESHAPE after
  entering SPECULATING (the choice was made in PLAIN) waits only `debounce` iterations and
  needs no standard-error term; leaving a shape tried before it was ever measured, one
  iteration.

Without shapes (on/off of the launch shape, the accept-length EMA): ``onoff-speculate`` and
``onoff-plain``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

from specfsm.fsm.kinds import PlainVariant, StepKind
from specfsm.fsm.observation import Observation
from specfsm.fsm.table import TOWARD, Event, Mode
from specfsm.fsm.verdict import OPTIMISTIC, POINT, PRIOR, UPPER, Verdict
from specfsm.policy.goodput.estimator import Estimate, Estimator
from specfsm.policy.goodput.ledger import Ledger
from specfsm.policy.goodput.objective import beats, best, catchup_lag, catchup_pays
from specfsm.policy.goodput.params import GoodputParams


class RuleContext(Protocol):
    """What a rule reads and moves: the parameters, the estimator, the ledger and the index of
    the current shape (a rule that RESHAPEs moves `cur`). `GoodputPolicy` is one; the rules
    name only this, so the policy module imports them and not the other way round."""

    params: GoodputParams
    est: Estimator
    ledger: Ledger
    cur: int


class _Hold:
    """A rule claimed the iteration: nothing is due, later rules are not asked."""

    def __repr__(self) -> str:
        return "HOLD"


HOLD: Final = _Hold()
Outcome = Verdict | _Hold | None
Rule = Callable[[RuleContext, Estimate, Ledger, Mode, Observation], Outcome]

_SPEC = StepKind.SPEC


def _pays(p: RuleContext, e: Estimate, obs: Observation, off: float, ms: float, acc: float) -> bool:
    """With zero-tax PLAIN: leaving it pays its catch-up (always with warm PLAIN): the decode
    lag the PLAIN stay left and the deferred prompts the adapter holds (`draft_debt`)."""
    if p.params.plain is PlainVariant.WARM:
        return True
    lag = catchup_lag(e.bs, obs.iteration - p.ledger.since, p.params.lag_cap) + obs.draft_debt
    return catchup_pays(p.params.horizon, off, ms, acc, p.est.catchup_ms(e.bs, e.ctx, lag))


def _debt(obs: Observation) -> str:
    """The deferred prompt tokens a LOAD_LOW's catch-up carries, for its reason."""
    return f", draft debt {obs.draft_debt} tokens" if obs.draft_debt > 0 else ""


def _verdict(
    p: RuleContext,
    e: Estimate,
    event: Event,
    rule: str,
    reason: str,
    *,
    acc: tuple[float, ...],
    ms: tuple[float, ...],
    bound: str,
    margin: float,
    chosen: int | None,
    shape: object = None,
    plain: float | None = None,
) -> Verdict:
    cands = p.est.cands
    if p.params.prefill_ms_per_token > 0.0:
        # the prefill pressure scaled every speculative price above: say by how much
        reason += (
            f", prefill share {p.est.share:.2f} (speculative prices x "
            f"{p.est.pressure_factor():.3f})"
        )
        n, worth = p.ledger.fired
        if worth > n and (event is Event.LOAD_HIGH or event is Event.LOAD_LOW):
            reason += f", debounce met in {p.ledger.streak_text()}"
    return Verdict(
        event,
        f"goodput.{rule}",
        reason,
        shape=shape,  # type: ignore[arg-type]
        bound=bound,
        margin=margin,
        predicted=e.predicted(acc, ms, plain),
        chosen="plain" if chosen is None else cands[chosen].label(),
        current=cands[p.cur].label(),
        bs=e.bs,
        ctx=e.ctx,
    )


# ---------------------------------------------------------------------------------- PLAIN
def speculate(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    prm, est, it = p.params, p.est, obs.iteration
    cands = est.cands
    ms = e.opt_ms  # never-measured shapes priced optimistically
    acc = e.acc
    ib, top = best(acc, ms, e.bs)
    resolving = L.probe_plain and est.measured(est.off_kind, None)
    margin = 0.0 if resolving else L.margin(it)
    bound = POINT if ms is e.spec_ms else OPTIMISTIC
    if resolving and prm.probe_z > 0.0:
        acc = e.upper()
        ib, top = best(acc, ms, e.bs)
        bound = UPPER
    past = beats(top, e.plain, margin) and _pays(p, e, obs, e.off_ms, ms[ib], acc[ib])
    L.shape_streak = 0
    if not past:
        L.reset_streak()
        if resolving:  # measured no better: resolved, and not a re-probe's to judge
            L.probe_plain = False
            return HOLD
        return None
    ev = L.confirm(
        True, mode, it, est.calibration is None or est.calibration.any_measured(est.off_kind)
    )
    if ev is None:
        if resolving:
            L.probe_plain = False
        return HOLD
    never = est.calibration is not None and not est.calibration.measured(_SPEC, cands[ib])
    L.speculating_chosen(cands[ib], never, False)
    reason = (
        f"goodput: {cands[ib].label()} {top:.0f} > plain {e.plain:.0f} tok/s "
        f"{_judged(margin, bound)} at bs={e.bs}, ctx={obs.mean_ctx}, accept_len={acc[ib]:.2f}"
        f"{_debt(obs)}"
    )
    rule = "probe-resolved" if resolving else "speculate"
    return _verdict(p, e, ev, rule, reason, acc=acc, ms=ms, bound=bound, margin=margin, chosen=ib)


def _judged(margin: float, bound: str) -> str:
    """How a load switch's reason says it was judged: the margin it needed (0 for a probe
    judged on its measurement) and, for a probe, the accept lengths' upper bound."""
    return f"x (1+{margin:g})" + (" at the accept lengths' upper bound" if bound == UPPER else "")


def reprobe(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    prm, est, it = p.params, p.est, obs.iteration
    if not (
        prm.reprobe_after
        and L.reprobe_n < prm.reprobe_max
        and it >= L.reprobe_at
        and est.spec_seen < prm.reprobe_evidence
        and L.dwelt(it) >= prm.min_dwell
    ):
        return None
    ms = e.opt_ms
    ip, topp = best(est.acc_prior, ms, e.bs)
    if not (topp > e.plain and _pays(p, e, obs, e.off_ms, ms[ip], est.acc_prior[ip])):
        L.reprobe_at = it + est.accept_refresh  # checked again after the next refresh
        return None
    acc_u = e.upper()
    ib, top = best(acc_u, ms, e.bs)
    L.reset_streak()
    cands = est.cands
    never = est.calibration is not None and not est.calibration.measured(_SPEC, cands[ib])
    L.speculating_chosen(cands[ib], never, True)
    if L.reprobing:
        reason = (
            f"goodput: re-probe {L.reprobe_n} of {cands[ib].label()} "
            f"({est.spec_seen} SPECULATING iterations measured; {top:.0f} tok/s "
            f"at the accept lengths' upper bound, plain {e.plain:.0f}) at bs={e.bs}, "
            f"ctx={obs.mean_ctx}"
        )
    else:
        reason = (
            f"goodput: {cands[ib].label()} {top:.0f} > plain {e.plain:.0f} tok/s "
            f"x (1+{prm.margin}) at bs={e.bs}, ctx={obs.mean_ctx}, accept_len={e.acc[ib]:.2f}"
        )
    return _verdict(
        p, e, Event.LOAD_LOW, "reprobe", reason, acc=acc_u, ms=ms, bound=UPPER, margin=0.0,
        chosen=ib,
    )  # fmt: skip


# ------------------------------------------------------------------ SPECULATING, RESYNCING
def probe_shape(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    probe = L.probe_shape
    if probe is None:
        return None
    est = p.est
    if est.measured(_SPEC, probe):
        L.probe_shape = None
        return None
    if mode is not Mode.SPECULATING or est.cands[p.cur] == probe:
        return HOLD
    L.probe_reshaped(obs.iteration)
    reason = f"goodput: probe {probe.label()} (never measured)"
    v = _verdict(
        p, e, Event.RESHAPE, "probe-shape", reason, acc=e.acc, ms=e.opt_ms, bound=OPTIMISTIC,
        margin=0.0, chosen=est.index[probe], shape=probe,
    )  # fmt: skip
    p.cur = est.index[probe]
    return v


def reprobe_run(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    if not L.reprobing:
        return None
    prm, est, it = p.params, p.est, obs.iteration
    cands = est.cands
    target = L.reprobe_shape
    L.shape_streak = 0
    if target is not None:
        if mode is not Mode.SPECULATING:
            return HOLD
        if cands[p.cur] != target:
            L.reprobe_reshaped(it)
            reason = f"goodput: re-probe goes to {target.label()}"
            v = _verdict(
                p, e, Event.RESHAPE, "reprobe-shape", reason, acc=e.upper(), ms=e.spec_ms,
                bound=UPPER, margin=0.0, chosen=est.index[target], shape=target,
            )  # fmt: skip
            p.cur = est.index[target]
            return v
        L.reprobe_at_shape(it, prm.reprobe_len)
    if mode is not Mode.SPECULATING or it < L.reprobe_end:
        return HOLD
    acc_u = e.upper()
    ib, top = best(acc_u, e.spec_ms, e.bs)
    if e.plain <= top:
        L.reprobe_kept(it)
        return HOLD
    L.reset_streak()
    reason = (
        f"goodput: re-probe {L.reprobe_n} measured no better: plain {e.plain:.0f} > "
        f"{cands[ib].label()} {top:.0f} tok/s (accept_len upper bound {acc_u[ib]:.2f}) at "
        f"bs={e.bs}, ctx={obs.mean_ctx}"
    )
    L.plain_entered(it, prm.reprobe_after)
    ev = TOWARD[(mode, Mode.PLAIN)]
    assert ev is not None  # SPECULATING here (checked above)
    return _verdict(
        p, e, ev, "reprobe-failed", reason, acc=acc_u, ms=e.spec_ms,
        bound=UPPER, margin=0.0, chosen=None,
    )  # fmt: skip


def plain(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    prm, est, it, cur = p.params, p.est, obs.iteration, p.cur
    cal = est.calibration
    cands = est.cands
    now = e.tok_s(cur)
    _, top = best(e.acc, e.spec_ms, e.bs)
    off = e.plain
    bound = POINT
    if cal is not None and not cal.measured(est.off_kind, None) and cal.any_measured(_SPEC):
        # PLAIN never measured on this engine, speculation was: probe PLAIN once where its
        # optimistic price (x (1 - probe_discount)) says it may pay
        off /= 1.0 - cal.probe_discount
        bound = OPTIMISTIC
    # a SPECULATING entered as a probe, once its shape is measured, is left on the
    # measurement alone (no margin); once it stays, it is resolved
    resolving = L.probe and cal is not None and cal.measured(_SPEC, cands[cur])
    acc = e.acc
    margin = 0.0 if resolving else L.margin(it)
    if resolving and prm.probe_z > 0.0:
        acc = e.upper()
        bound = UPPER
        past = off > e.tok_s(cur, acc) and off >= best(acc, e.spec_ms, e.bs)[1]
    else:
        past = beats(off, now, margin) and off >= top
    ev = L.confirm(past, mode, it, cal is None or cal.any_measured(_SPEC))
    if ev is None:
        if resolving and mode is Mode.SPECULATING:
            L.probe = False
        return None
    L.plain_chosen(it, cal is not None and not cal.measured(est.off_kind, None), prm.reprobe_after)
    reason = (
        f"goodput: plain {off:.0f} > {cands[cur].label()} {now:.0f} tok/s "
        f"{_judged(margin, bound)} at bs={e.bs}, ctx={obs.mean_ctx}, accept_len={e.acc[cur]:.2f}"
    )
    rule = "probe-measured" if resolving else "plain"
    return _verdict(
        p, e, ev, rule, reason, acc=acc, ms=e.spec_ms, bound=bound, margin=margin, chosen=None,
        plain=off,
    )  # fmt: skip


def reshape(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    prm, est, it, cur = p.params, p.est, obs.iteration, p.cur
    now = e.tok_s(cur)
    if e.opt_ms is not e.spec_ms:  # the choice among shapes: never-measured shapes optimistic
        ib, top = best(e.acc, e.opt_ms, e.bs, cur, now)
    else:
        ib, top = best(e.acc, e.spec_ms, e.bs)
    resume = L.shape_since < L.since  # no RESHAPE yet since entering the mode
    need = prm.shape_margin
    if prm.shape_z > 0.0 and ib != cur and not resume and not L.exploring:
        # both predictions hang on the fitted alpha: its error moves their ratio by
        # d log(accept_b / accept_cur) / d alpha x sd(alpha) (not when leaving a shape
        # tried before it was ever measured: its measured cost answered the question)
        need += prm.shape_z * abs(est.dlog[ib] - est.dlog[cur]) * est.alpha_sd
    if mode is not Mode.SPECULATING or ib == cur or not beats(top, now, need):
        L.shape_streak = 0
        return None
    L.shape_streak += 1
    if resume or L.exploring:
        ready = L.shape_streak >= (1 if L.initial or L.exploring else prm.debounce)
    else:
        ready = L.shape_streak >= prm.shape_debounce and it - L.shape_since >= prm.shape_dwell
    if not ready:
        return None
    new = est.cands[ib]
    cal = est.calibration
    L.reshaped(it, cal is not None and not cal.measured(_SPEC, new))
    reason = (
        f"goodput: {new.label()} {top:.0f} > {est.cands[cur].label()} {now:.0f} tok/s "
        f"x (1+{prm.shape_margin}) at bs={e.bs}, ctx={obs.mean_ctx}, accept_len "
        f"{e.acc[ib]:.2f} vs {e.acc[cur]:.2f}"
    )
    ms = e.opt_ms
    v = _verdict(
        p, e, Event.RESHAPE, "reshape", reason, acc=e.acc, ms=ms,
        bound=POINT if ms is e.spec_ms else OPTIMISTIC, margin=need, chosen=ib, shape=new,
    )  # fmt: skip
    p.cur = ib
    return v


# --------------------------------------------------------------------------------- on/off
def onoff(p: RuleContext, e: Estimate, L: Ledger, mode: Mode, obs: Observation) -> Outcome:
    """The launch shape against PLAIN at the accept-length EMA."""
    est = p.est
    acc = est.ema_accept_len
    spec = 1000.0 * e.bs * acc / e.spec_ms[0]
    margin = L.margin(obs.iteration)
    if mode is Mode.PLAIN:
        past = beats(spec, e.plain, margin) and _pays(p, e, obs, e.off_ms, e.spec_ms[0], acc)
    else:
        past = beats(e.plain, spec, margin)
    ev = L.confirm(past, mode, obs.iteration, True)
    if ev is None:
        return None
    if mode is Mode.PLAIN:
        rule = "onoff-speculate"
        reason = f"goodput: spec {spec:.0f} > plain {e.plain:.0f} tok/s"
    else:
        rule = "onoff-plain"
        reason = f"goodput: plain {e.plain:.0f} > spec {spec:.0f} tok/s"
    reason += f" x (1+{margin:g}) at bs={e.bs}, ctx={obs.mean_ctx}, accept_len={acc:.2f}"
    if mode is Mode.PLAIN:
        reason += _debt(obs)
    return _verdict(
        p, e, ev, rule, reason, acc=(acc,), ms=e.spec_ms, bound=POINT, margin=margin,
        chosen=0 if mode is Mode.PLAIN else None,
    )  # fmt: skip


#: the rules asked in each mode, in order (DRAINING asks none)
SHAPE_RULES: dict[Mode, Sequence[Rule]] = {
    Mode.PLAIN: (speculate, reprobe),
    Mode.SPECULATING: (probe_shape, reprobe_run, plain, reshape),
    Mode.RESYNCING: (probe_shape, reprobe_run, plain, reshape),
}
ONOFF_RULES: dict[Mode, Sequence[Rule]] = {
    Mode.PLAIN: (onoff,),
    Mode.SPECULATING: (onoff,),
    Mode.RESYNCING: (onoff,),
}
#: every rule name a verdict may carry (after "goodput.")
RULE_NAMES = (
    "speculate",
    "probe-resolved",
    "reprobe",
    "probe-shape",
    "reprobe-shape",
    "reprobe-failed",
    "plain",
    "probe-measured",
    "reshape",
    "onoff-speculate",
    "onoff-plain",
)
__all__ = [
    "HOLD",
    "ONOFF_RULES",
    "PRIOR",
    "RULE_NAMES",
    "SHAPE_RULES",
    "Outcome",
    "Rule",
    "RuleContext",
]
