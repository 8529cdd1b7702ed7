"""The goodput policy's parameters: one validated record; `describe()` is its fields.

What each parameter does is told where it acts (the estimator, the rules) and in
docs/policies.md; here are the defaults and the ranges a value must fall in.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from specfsm.fsm.kinds import PLAIN_VARIANTS, PlainVariant
from specfsm.model.acceptance import DraftShape, shape_text


def _plain(value: object) -> PlainVariant:
    try:
        return PlainVariant.parse(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(
            f"GoodputPolicy: plain must be one of {PLAIN_VARIANTS}: {value!r}"
        ) from None


def _shapes(value: Iterable[DraftShape]) -> tuple[DraftShape, ...]:
    shapes = tuple(value)
    bad = [s for s in shapes if not isinstance(s, DraftShape)]
    if bad:
        raise ValueError(f"GoodputPolicy: shapes must be DraftShape, got {bad[0]!r}")
    return tuple(dict.fromkeys(shapes))


@attrs.frozen(kw_only=True)
class GoodputParams:
    """Every number the goodput policy decides with (none of its learned state)."""

    #: mean tokens per verify incl. the bonus at the launch shape: the acceptance prior
    accept_len: float
    #: the shapes chosen among besides PLAIN (empty: on/off of the launch shape)
    shapes: tuple[DraftShape, ...] = attrs.field(default=(), converter=_shapes)
    #: refine the costs online from the measured step times
    calibrate: bool = True
    ema_alpha: float = 0.01
    margin: float = 0.02
    debounce: int = 4
    min_dwell: int = 32
    horizon: int = 64
    lag_cap: int = 128
    relax_half_life: int = 512
    ctx_bucket: int = 256
    plain: PlainVariant = attrs.field(default=PlainVariant.ZERO_TAX, converter=_plain)
    shape_margin: float = 0.005
    shape_debounce: int = 8
    shape_dwell: int = 128
    cal_ema: float = 0.1
    #: a measured step counts at most this many times its bucket's calibration factor, and a
    #: new bucket's first one that far off the factor there waits for the second (0: off;
    #: `StepCalibration`)
    cal_clip: float = 4.0
    depth_ema: float = 0.003
    shape_z: float = 3.0
    probe_z: float = 2.0
    reprobe_after: int = 64
    reprobe_max: int = 4
    reprobe_len: int = 16
    reprobe_evidence: int = 64
    rho: float = 0.5
    #: the batch priced is decode_bs + price_queued x queued (0: the decode batch alone)
    price_queued: float = 0.0
    #: decide before prefill forwards too, on the load they bring (`sees_prefills`)
    prefills: bool = True
    #: the target's prefill time per prompt token (ms) on this engine; > 0 turns the prefill
    #: pressure on: speculation is priced on the GPU time prefills leave to decode, and a
    #: prefill iteration counts toward `min_dwell` as the decode steps its time is worth
    prefill_ms_per_token: float = 0.0
    #: a speculative prefill's extra time as a fraction of the target's (the draft's prefill
    #: and the host's wait after it), which zero-tax PLAIN defers
    prefill_extra: float = 0.1
    #: weight of one observation in the prefill and decode time averages
    prefill_ema: float = 0.05
    #: with the pressure on, a prefill iteration past the threshold also counts toward
    #: `debounce` as the decode steps its time is worth (false: one iteration)
    prefill_debounce: bool = True
    #: a load switch within this many iterations of the one before doubles the margin the
    #: next needs (up to `max_margin`); each such stretch without one halves it back (0: off)
    reversal_window: int = 0
    max_margin: float = 0.16

    def __attrs_post_init__(self) -> None:
        if self.accept_len < 1.0:
            raise ValueError(
                f"GoodputPolicy: accept_len (incl. bonus) must be >= 1: {self.accept_len}"
            )
        if not 0.0 < self.ema_alpha <= 1.0:
            raise ValueError(f"GoodputPolicy: ema_alpha must be in (0, 1]: {self.ema_alpha}")
        if self.margin < 0 or self.shape_margin < 0:
            raise ValueError(
                f"GoodputPolicy: margins must be >= 0: {self.margin}, {self.shape_margin}"
            )
        if self.debounce < 1 or self.min_dwell < 0 or self.horizon < 1:
            raise ValueError("GoodputPolicy: need debounce >= 1, min_dwell >= 0, horizon >= 1")
        if self.shape_debounce < 1 or self.shape_dwell < 0:
            raise ValueError("GoodputPolicy: need shape_debounce >= 1, shape_dwell >= 0")
        if self.ctx_bucket < 1:
            raise ValueError(f"GoodputPolicy: ctx_bucket must be >= 1: {self.ctx_bucket}")
        if (
            self.reprobe_after < 0
            or self.reprobe_max < 0
            or self.reprobe_len < 1
            or self.reprobe_evidence < 0
        ):
            raise ValueError(
                "GoodputPolicy: need reprobe_after >= 0, reprobe_max >= 0, reprobe_len >= 1, "
                "reprobe_evidence >= 0"
            )
        if not 0.0 <= self.price_queued <= 1.0:
            raise ValueError(f"GoodputPolicy: price_queued must be in [0, 1]: {self.price_queued}")
        if self.prefill_ms_per_token < 0 or self.prefill_extra < 0:
            raise ValueError(
                "GoodputPolicy: prefill_ms_per_token and prefill_extra must be >= 0: "
                f"{self.prefill_ms_per_token}, {self.prefill_extra}"
            )
        if not 0.0 < self.prefill_ema <= 1.0:
            raise ValueError(f"GoodputPolicy: prefill_ema must be in (0, 1]: {self.prefill_ema}")
        if self.reversal_window < 0 or (self.reversal_window and self.max_margin < self.margin):
            raise ValueError(
                "GoodputPolicy: need reversal_window >= 0 and max_margin >= margin: "
                f"{self.reversal_window}, {self.max_margin}"
            )
        if self.relax_half_life < 0:
            raise ValueError(f"GoodputPolicy: relax_half_life must be >= 0: {self.relax_half_life}")
        if self.cal_clip != 0.0 and self.cal_clip <= 1.0:
            raise ValueError(f"GoodputPolicy: cal_clip must be > 1 (0: off): {self.cal_clip}")
        if not 0.0 < self.cal_ema <= 1.0 or not 0.0 < self.depth_ema <= 1.0:
            raise ValueError(f"GoodputPolicy: cal_ema, depth_ema must be in (0, 1]: {self.cal_ema}")

    def describe(self) -> dict[str, object]:
        """Every field (shapes as their text), in declaration order."""
        out: dict[str, Any] = {}
        for f in attrs.fields(GoodputParams):
            v = getattr(self, f.name)
            if f.name == "shapes":
                v = [shape_text(s) for s in v]
            elif f.name == "plain":
                v = v.value
            out[f.name] = v
        return out


#: the keyword parameters (name -> int, float or str) a JSON description may give
KEYWORDS: dict[str, type] = {
    f.name: str if f.name == "plain" else type(f.default)
    for f in attrs.fields(GoodputParams)
    if f.name not in ("accept_len", "shapes", "calibrate", "prefills", "prefill_debounce")
}
