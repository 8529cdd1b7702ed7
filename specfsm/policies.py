"""Policies: cheap, deterministic rules that turn an observation into a load event.

A policy sees the current mode and one `Observation` per iteration and returns an Event that is
legal in that mode, or None. It is deterministic (same observations -> same decisions, so TP and
DP ranks agree) and keeps only small state of its own (debounce counters, EMAs). It never emits
completion events (DRAINED, RESYNCED): those come from the engine adapter.

All policies reduce to one question, "should the engine speculate?", answered by `toward()`.

Writing your own policy (the plugin interface)
-----------------------------------------------
A policy is any object with the three members of the `Policy` protocol below: `decide(mode,
obs) -> Event | None`, a `last_reason: str` attribute and `describe() -> dict` (whose "policy"
key names it in log lines). Its constructor takes the JSON keyword arguments of the config's
policy object. Name it in the SGLang config by dotted path, ``{"name": "mypkg.mod:MyPolicy",
...kwargs}``, or register it under the entry-point group ``specfsm.policies``
(``[project.entry-points."specfsm.policies"] mine = "mypkg.mod:MyPolicy"``, then
``{"name": "mine", ...}``); `load_policy_factory` resolves both. `decide` runs once per
scheduler iteration on the hot path: keep it allocation-free in the common case. A policy
that raises, returns anything but None or a load event legal in `mode`, is faulted by the
machine (PLAIN; replaced by FixedPolicy(False) after repeated faults), never the engine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from specfsm.observation import Observation
from specfsm.table import Event, Mode

#: Entry-point group under which installed packages register policy classes (or factories).
ENTRY_POINT_GROUP = "specfsm.policies"

_PLAIN = Mode.PLAIN  # module-level aliases: one global load on the per-iteration path
_DRAINING = Mode.DRAINING


def toward(mode: Mode, speculate: bool) -> Event | None:
    """The load event that moves `mode` toward speculating (True) or not (False), if any.

    DRAINING has no load event: the drain always completes first.
    """
    if speculate:
        return Event.LOAD_LOW if mode is Mode.PLAIN else None
    if mode is Mode.SPECULATING or mode is Mode.RESYNCING:
        return Event.LOAD_HIGH
    return None


@runtime_checkable
class Policy(Protocol):
    """What the machine asks once per iteration."""

    #: A short human-readable reason for the last non-None decision (read only on transitions).
    last_reason: str

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        """An event legal in `mode`, or None (the common case)."""
        ...

    def describe(self) -> dict[str, object]:
        """The policy's name and parameters, for the `specfsm.config` log line."""
        ...


class FixedPolicy:
    """Always (speculate=True) or never (False) speculate: the static baselines."""

    def __init__(self, speculate: bool) -> None:
        self.speculate = bool(speculate)
        self.last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        ev = toward(mode, self.speculate)
        if ev is not None:
            self.last_reason = "fixed: always speculate" if self.speculate else "fixed: never"
        return ev

    def describe(self) -> dict[str, object]:
        return {"policy": "fixed", "speculate": self.speculate}


class ThresholdPolicy:
    """Stop speculating above `high`, resume at or below `low`, with debounce and dwell.

    The load signal is the decode batch size (or running requests with signal="running").
    A load event fires only after `debounce` consecutive iterations on the far side of a
    threshold and at least `min_dwell` iterations after the last mode change; `low < high`
    leaves a dead band between the two, so the rule cannot thrash at a single threshold.
    """

    def __init__(
        self,
        high: int,
        low: int,
        debounce: int = 4,
        min_dwell: int = 16,
        signal: str = "decode_bs",
    ) -> None:
        if not (isinstance(high, int) and isinstance(low, int)):
            raise ValueError(f"ThresholdPolicy: high and low must be ints, got {high!r}, {low!r}")
        if low < 0:
            raise ValueError(f"ThresholdPolicy: low must be >= 0, got {low}")
        if not low < high:
            raise ValueError(f"ThresholdPolicy: need low < high, got low={low}, high={high}")
        if debounce < 1:
            raise ValueError(f"ThresholdPolicy: debounce must be >= 1, got {debounce}")
        if min_dwell < 0:
            raise ValueError(f"ThresholdPolicy: min_dwell must be >= 0, got {min_dwell}")
        if signal not in ("decode_bs", "running"):
            raise ValueError(f"ThresholdPolicy: signal must be decode_bs or running: {signal!r}")
        self.high = high
        self.low = low
        self.debounce = debounce
        self.min_dwell = min_dwell
        self.signal = signal
        self._use_running = signal == "running"
        self._streak = 0  # consecutive iterations past the threshold that matters now
        self._mode: Mode | None = None
        self._since = 0  # iteration at which the policy first saw the current mode
        self.last_reason = ""

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        if mode is not self._mode:
            self._mode = mode
            self._since = obs.iteration
            self._streak = 0
        load = obs.running if self._use_running else obs.decode_bs
        if mode is _PLAIN:
            past = load <= self.low
        elif mode is _DRAINING:
            return None
        else:
            past = load > self.high
        if not past:  # the common case: nothing to count
            self._streak = 0
            return None
        self._streak += 1
        if self._streak < self.debounce or obs.iteration - self._since < self.min_dwell:
            return None
        self._streak = 0
        if mode is Mode.PLAIN:
            self.last_reason = (
                f"{self.signal}={load} <= low={self.low} for {self.debounce} iterations"
            )
            return Event.LOAD_LOW
        self.last_reason = f"{self.signal}={load} > high={self.high} for {self.debounce} iterations"
        return Event.LOAD_HIGH

    def describe(self) -> dict[str, object]:
        return {
            "policy": "threshold",
            "high": self.high,
            "low": self.low,
            "debounce": self.debounce,
            "min_dwell": self.min_dwell,
            "signal": self.signal,
        }


class ScriptedPolicy:
    """Follows a schedule of target modes by iteration (tests, debugging, bug reproduction).

    `schedule` is a sequence of (iteration, target) with strictly increasing iterations and
    targets SPECULATING or PLAIN; from each iteration on, the policy moves toward that target.
    Before the first entry the target is `initial`. A callable `target(iteration) -> bool`
    (True = speculate) may be given instead, e.g. for random or flapping patterns.
    """

    def __init__(
        self,
        schedule: Sequence[tuple[int, Mode]] | Callable[[int], bool],
        initial: Mode = Mode.SPECULATING,
    ) -> None:
        if initial not in (Mode.SPECULATING, Mode.PLAIN):
            raise ValueError(f"ScriptedPolicy: initial must be SPECULATING or PLAIN: {initial!r}")
        self._fn: Callable[[int], bool] | None = None
        self._steps: list[tuple[int, bool]] = []
        if callable(schedule):
            self._fn = schedule
        else:
            last = -1
            for it, target in schedule:
                if target not in (Mode.SPECULATING, Mode.PLAIN):
                    raise ValueError(
                        f"ScriptedPolicy: targets must be SPECULATING or PLAIN, got {target!r}"
                    )
                if it <= last:
                    raise ValueError(f"ScriptedPolicy: iterations must increase: {it} <= {last}")
                last = it
                self._steps.append((it, target is Mode.SPECULATING))
        self._initial = initial is Mode.SPECULATING
        self._pos = 0
        self._want = self._initial
        self.last_reason = ""

    def target(self, iteration: int) -> bool:
        """True when the schedule wants speculation at `iteration`."""
        if self._fn is not None:
            return bool(self._fn(iteration))
        steps = self._steps
        while self._pos < len(steps) and steps[self._pos][0] <= iteration:
            self._want = steps[self._pos][1]
            self._pos += 1
        return self._want

    def decide(self, mode: Mode, obs: Observation) -> Event | None:
        want = self.target(obs.iteration)
        ev = toward(mode, want)
        if ev is not None:
            target = "SPECULATING" if want else "PLAIN"
            self.last_reason = f"scripted: target {target} at iteration {obs.iteration}"
        return ev

    def describe(self) -> dict[str, object]:
        return {
            "policy": "scripted",
            "initial": "SPECULATING" if self._initial else "PLAIN",
            "schedule": "callable" if self._fn is not None else len(self._steps),
        }


def load_policy_factory(name: str) -> Callable[..., Any]:
    """The class (or factory) of a plugin policy: ``"pkg.module:Attr"`` (dotted path, ``Attr``
    may be ``Outer.Inner``) or the name of an entry point in group ``specfsm.policies``.

    Raises LookupError naming what was tried (module not importable, attribute missing, no
    such entry point: the installed ones are listed) and TypeError when it is not callable.
    """
    if ":" in name:
        mod_name, _, attr = name.partition(":")
        if not mod_name or not attr:
            raise LookupError(f"policy {name!r}: a dotted path is 'package.module:Class'")
        try:
            obj: Any = importlib.import_module(mod_name)
        except ImportError as exc:
            raise LookupError(f"policy {name!r}: cannot import {mod_name!r}: {exc}") from exc
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise LookupError(f"policy {name!r}: {mod_name!r} has no attribute {attr!r}")
            obj = getattr(obj, part)
    else:
        from importlib.metadata import entry_points

        eps = entry_points(group=ENTRY_POINT_GROUP)
        found = [ep for ep in eps if ep.name == name]
        if not found:
            installed = sorted(ep.name for ep in eps)
            raise LookupError(
                f"policy {name!r}: no entry point of that name in group {ENTRY_POINT_GROUP!r} "
                f"(installed: {installed or 'none'})"
            )
        try:
            obj = found[0].load()
        except Exception as exc:
            raise LookupError(
                f"policy {name!r}: entry point {found[0].value!r} failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not callable(obj):
        raise TypeError(f"policy {name!r}: {obj!r} is not a class or factory")
    return obj  # type: ignore[no-any-return]


def check_policy(obj: object, name: str) -> Policy:
    """`obj` if it has the Policy protocol's members, else TypeError naming the missing ones."""
    missing = [
        m
        for m, want_callable in (("decide", True), ("describe", True), ("last_reason", False))
        if not hasattr(obj, m) or (want_callable and not callable(getattr(obj, m)))
    ]
    if missing:
        raise TypeError(
            f"policy {name!r} built {type(obj).__name__}, which lacks {', '.join(missing)} "
            "(a policy has decide(mode, obs) -> Event | None, last_reason: str, describe())"
        )
    return obj  # type: ignore[return-value]
