"""Load traces and the workload: what the simulator serves."""

from __future__ import annotations

import math
from collections.abc import Callable

import attrs


# ------------------------------------------------------------------------------ loads
@attrs.frozen
class Load:
    """A load trace: closed-loop target concurrency or open-loop Poisson rate, as f(t seconds)."""

    name: str
    kind: str  # "concurrency" | "poisson"
    level: Callable[[float], float]
    duration_s: float | None = None  # None: run by iteration count

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("concurrency", "poisson"):
            raise ValueError(f"Load.kind must be concurrency or poisson: {self.kind!r}")


def fixed_concurrency(c: int) -> Load:
    return Load(f"conc{c}", "concurrency", lambda t: float(c))


def poisson(rate: float, duration_s: float | None = None) -> Load:
    return Load(f"poisson{rate:g}", "poisson", lambda t: rate, duration_s)


def ramp(lo: float, hi: float, duration_s: float, kind: str = "concurrency") -> Load:
    """lo -> hi -> lo, linear, over duration_s (a triangle)."""
    half = duration_s / 2

    def f(t: float) -> float:
        x = t / half if t < half else max(0.0, (duration_s - t) / half)
        return lo + (hi - lo) * x

    return Load(f"ramp{lo:g}-{hi:g}", kind, f, duration_s)


def bursts(
    lo: float, hi: float, period_s: float, duration_s: float, kind: str = "concurrency"
) -> Load:
    """On/off: lo for half a period, hi for the other half (starting low)."""

    def f(t: float) -> float:
        return hi if (t % period_s) >= period_s / 2 else lo

    return Load(f"bursts{lo:g}/{hi:g}", kind, f, duration_s)


def sinusoid(
    lo: float, hi: float, period_s: float, duration_s: float, kind: str = "concurrency"
) -> Load:
    """Diurnal-like: lo + (hi-lo) * (1 - cos(2 pi t / period)) / 2."""

    def f(t: float) -> float:
        return lo + (hi - lo) * (1 - math.cos(2 * math.pi * t / period_s)) / 2

    return Load(f"sine{lo:g}-{hi:g}", kind, f, duration_s)


@attrs.frozen
class Workload:
    """Request lengths (uniform integer ranges, inclusive) and the running-request cap."""

    prompt_len: tuple[int, int] = (256, 768)
    output_len: tuple[int, int] = (128, 640)
    max_running: int = 256


def named_traces(duration_s: float) -> dict[str, Load]:
    """The three time-varying traces of the sweep (closed loop, target concurrency), by the
    name `specfsm sim --trace` takes (their `Load.name`s carry the levels: ramp1-256, ...)."""
    return {
        "ramp": ramp(1, 256, duration_s),
        "bursts": bursts(2, 128, duration_s / 8, duration_s),
        "sine": sinusoid(2, 200, duration_s / 3, duration_s),
    }


def traces(duration_s: float) -> list[Load]:
    """The three time-varying traces of the sweep (closed loop, target concurrency)."""
    return list(named_traces(duration_s).values())


#: Every policy `lineup` knows, by name (`specfsm sim --policies`).
