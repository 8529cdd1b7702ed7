"""Policies from other packages: a dotted path or an entry point.

A policy is any object with the three members of the `Policy` protocol
(`specfsm.fsm.decision.Policy`): `decide(mode, obs) -> Verdict | Event | None`, a
`last_reason: str` attribute and `describe() -> dict` (whose "policy" key names it in log
lines). Return a `Verdict` (`specfsm.fsm.verdict`; `rule_verdict` builds one for a rule on an
observed signal) and the transition's log line carries it as its ``decision`` object, as the
shipped policies' lines do; a bare Event is applied as well, its line without a decision.
Its constructor takes the JSON keyword arguments of the config's policy object. Name it by
dotted path, ``{"name": "mypkg.mod:MyPolicy", ...kwargs}``, or register it under the
entry-point group ``specfsm.policies``
(``[project.entry-points."specfsm.policies"] mine = "mypkg.mod:MyPolicy"``, then
``{"name": "mine", ...}``); `load_policy_factory` resolves both. `decide` runs once per
scheduler iteration on the hot path: keep it allocation-free in the common case (build the
Verdict only when an event is due). A policy that raises, or returns anything but None or a
load event legal in `mode` (bare or in a Verdict), is faulted by the machine (PLAIN; replaced
by FixedPolicy(False) after repeated faults), never the engine.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from specfsm.fsm.decision import Policy

#: Entry-point group under which installed packages register policy classes (or factories).
ENTRY_POINT_GROUP = "specfsm.policies"


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
            "(a policy has decide(mode, obs) -> Verdict | Event | None, last_reason: str, "
            "describe())"
        )
    return obj  # type: ignore[return-value]


def entry_point_exists(name: str) -> bool:
    """True when an installed package registers `name` in group ``specfsm.policies``."""
    from importlib.metadata import entry_points

    return any(ep.name == name for ep in entry_points(group=ENTRY_POINT_GROUP))
