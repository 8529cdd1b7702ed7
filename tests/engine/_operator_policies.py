"""Misbehaving plugin policies for tests/engine/test_operator_safety.py, named by dotted path
(``_operator_policies:Raising``) in the config or the control file; the spawned scheduler
imports this module through the sys.path it inherits from pytest."""

from __future__ import annotations

from typing import Any


class _Base:
    last_reason = ""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def describe(self) -> dict[str, object]:
        return {"policy": type(self).__name__.lower()}


class Raising(_Base):
    """decide raises."""

    def decide(self, mode: Any, obs: Any) -> Any:
        raise RuntimeError(f"policy bug at iteration {obs.iteration}")


class Garbage(_Base):
    """decide returns a string."""

    def decide(self, mode: Any, obs: Any) -> Any:
        return "LOAD_HIGH"


class WrongEvent(_Base):
    """decide returns a completion event."""

    def decide(self, mode: Any, obs: Any) -> Any:
        from specfsm import Event

        return Event.DRAINED
