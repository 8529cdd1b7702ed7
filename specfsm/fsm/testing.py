"""Helpers for testing code that uses specfsm (as structlog ships `structlog.testing`)."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import LogCapture

from specfsm.fsm.actions import action_name
from specfsm.fsm.log import TransitionLog
from specfsm.fsm.record import TransitionInfo
from specfsm.fsm.table import SHAPE_TRANSITIONS, Mode, shape_action_name


class RecordingActions:
    """ModeActions that record every call as ("enter_plain", TransitionInfo) and can be told
    to raise from chosen actions (`fail={"enter_plain": 1}` raises once)."""

    def __init__(self, fail: dict[str, int] | None = None) -> None:
        self.calls: list[tuple[str, TransitionInfo]] = []
        self.fail: dict[str, int] = dict(fail or {})
        known = {action_name(k, m) for m in Mode for k in ("enter", "exit")}
        known |= {shape_action_name(e, m) for m, e in SHAPE_TRANSITIONS}
        unknown = set(self.fail) - known
        if unknown:
            raise ValueError(f"RecordingActions: no such actions {sorted(unknown)}")

    def _record(self, name: str, t: TransitionInfo) -> None:
        self.calls.append((name, t))
        left = self.fail.get(name, 0)
        if left:
            self.fail[name] = left - 1
            raise RuntimeError(f"injected failure in {name}")

    def enter_speculating(self, t: TransitionInfo) -> None:
        self._record("enter_speculating", t)

    def exit_speculating(self, t: TransitionInfo) -> None:
        self._record("exit_speculating", t)

    def enter_draining(self, t: TransitionInfo) -> None:
        self._record("enter_draining", t)

    def exit_draining(self, t: TransitionInfo) -> None:
        self._record("exit_draining", t)

    def enter_plain(self, t: TransitionInfo) -> None:
        self._record("enter_plain", t)

    def exit_plain(self, t: TransitionInfo) -> None:
        self._record("exit_plain", t)

    def enter_resyncing(self, t: TransitionInfo) -> None:
        self._record("enter_resyncing", t)

    def exit_resyncing(self, t: TransitionInfo) -> None:
        self._record("exit_resyncing", t)

    def reshape_speculating(self, t: TransitionInfo) -> None:
        self._record("reshape_speculating", t)

    def names(self) -> list[str]:
        """The names of the actions called so far, in order."""
        return [name for name, _ in self.calls]


def capturing_log(rank: int = 0) -> tuple[TransitionLog, list[MutableMapping[str, Any]]]:
    """A TransitionLog whose lines land, as event dicts, in the returned list."""
    capture = LogCapture()
    logger = structlog.wrap_logger(None, processors=[capture])
    return TransitionLog(logger, rank=rank), capture.entries


@contextmanager
def capture_transitions() -> Iterator[list[MutableMapping[str, Any]]]:
    """Capture specfsm lines logged through structlog's global configuration."""
    with structlog.testing.capture_logs() as entries:
        yield entries
