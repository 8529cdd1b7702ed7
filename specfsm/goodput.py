"""GoodputPolicy: speculate when the cost model predicts more accepted tokens per second.

Each iteration the policy compares, at the observed decode batch size bs,

    plain goodput  = bs / plain_ms(bs)
    spec goodput   = bs * ema_accept_len / spec_ms(bs)

from a `CostModel` (a step-cost table fitted offline) and an online EMA of the accept length
(tokens committed per verify incl. the bonus; updated only from verifies seen while
SPECULATING, so a PLAIN stretch leaves the last estimate in place). It moves toward the mode
whose predicted goodput is higher by more than `margin` (relative hysteresis), after `debounce`
consecutive iterations agreeing and at least `min_dwell` iterations in the current mode.
Leaving PLAIN additionally requires that the time saved over `horizon` iterations pays for the
RESYNCING catch-up (a draft-extend over the lag tokens, estimated as bs x iterations in PLAIN,
at most `lag_cap` per request since requests turn over).

Inputs are `decode_bs` and `accept_lens` only (identical on every TP/DP rank), so ranks agree.
State: the EMA, a streak counter, the mode-entry iteration, and a per-bs prediction cache.
"""

from __future__ import annotations

from specfsm.costs import CostModel
from specfsm.observation import Observation
from specfsm.table import Event, Mode


class GoodputPolicy:
    """Pick the mode with the higher predicted goodput; hysteresis margin, debounce, dwell."""

    def __init__(
        self,
        cost: CostModel,
        accept_len: float,
        *,
        ema_alpha: float = 0.05,
        margin: float = 0.02,
        debounce: int = 4,
        min_dwell: int = 32,
        horizon: int = 64,
        lag_cap: int = 256,
    ) -> None:
        if accept_len < 1.0:
            raise ValueError(f"GoodputPolicy: accept_len (incl. bonus) must be >= 1: {accept_len}")
        if not 0.0 < ema_alpha <= 1.0:
            raise ValueError(f"GoodputPolicy: ema_alpha must be in (0, 1]: {ema_alpha}")
        if margin < 0:
            raise ValueError(f"GoodputPolicy: margin must be >= 0: {margin}")
        if debounce < 1 or min_dwell < 0 or horizon < 1:
            raise ValueError("GoodputPolicy: need debounce >= 1, min_dwell >= 0, horizon >= 1")
        self.cost = cost
        self.prior_accept_len = float(accept_len)
        self.ema_accept_len = float(accept_len)
        self.ema_alpha = ema_alpha
        self.margin = margin
        self.debounce = debounce
        self.min_dwell = min_dwell
        self.horizon = horizon
        self.lag_cap = lag_cap
        self.last_reason = ""
        self._mode: Mode | None = None
        self._since = 0
        self._streak = 0
        self._cache: dict[int, tuple[float, float]] = {}  # bs -> (plain_ms, spec_ms)

    def _costs(self, bs: int) -> tuple[float, float]:
        c = self._cache.get(bs)
        if c is None:
            c = (self.cost.plain_ms(bs), self.cost.spec_ms(bs))
            self._cache[bs] = c
        return c

    def predict(self, bs: int, accept_len: float | None = None) -> tuple[float, float]:
        """(plain, spec) predicted output tokens/s at decode batch size bs."""
        if bs <= 0:
            return 0.0, 0.0
        acc = self.ema_accept_len if accept_len is None else accept_len
        p_ms, s_ms = self._costs(bs)
        return 1000.0 * bs / p_ms, 1000.0 * bs * acc / s_ms

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        if mode is not self._mode:
            self._mode = mode
            self._since = obs.iteration
            self._streak = 0
        if mode is Mode.SPECULATING and obs.accept_lens:
            mean = sum(obs.accept_lens) / len(obs.accept_lens)
            self.ema_accept_len += self.ema_alpha * (mean - self.ema_accept_len)
        if mode is Mode.DRAINING:
            return None
        bs = obs.decode_bs
        if bs <= 0:
            self._streak = 0
            return None
        plain, spec = self.predict(bs)
        if mode is Mode.PLAIN:
            past = spec > plain * (1.0 + self.margin)
            if past:
                p_ms, s_ms = self._costs(bs)
                lag = bs * min(self.lag_cap, max(1, obs.iteration - self._since))
                saved = self.horizon * (p_ms - s_ms / self.ema_accept_len)
                past = saved > self.cost.catchup_ms(bs, lag)
        else:
            past = plain > spec * (1.0 + self.margin)
        self._streak = self._streak + 1 if past else 0
        if self._streak < self.debounce or obs.iteration - self._since < self.min_dwell:
            return None
        self._streak = 0
        if mode is Mode.PLAIN:
            self.last_reason = (
                f"goodput: spec {spec:.0f} > plain {plain:.0f} tok/s x (1+{self.margin}) at "
                f"bs={bs}, accept_len={self.ema_accept_len:.2f}"
            )
            return Event.LOAD_LOW
        self.last_reason = (
            f"goodput: plain {plain:.0f} > spec {spec:.0f} tok/s x (1+{self.margin}) at "
            f"bs={bs}, accept_len={self.ema_accept_len:.2f}"
        )
        return Event.LOAD_HIGH

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
            "cost": self.cost.describe(),
        }
