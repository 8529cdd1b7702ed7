"""The test harness's SGLang shutdown wrapper spares the resource tracker and nothing else."""

from __future__ import annotations

import os
from multiprocessing import resource_tracker
from typing import Any

import _resource_tracker as H


def _recorder() -> tuple[list[tuple[Any, ...]], Any]:
    calls: list[tuple[Any, ...]] = []

    def kill_process_tree(parent_pid: Any, include_parent: bool = True, **kw: Any) -> None:
        calls.append((parent_pid, include_parent, kw.get("skip_pid"), kw.get("wait_timeout")))

    return calls, kill_process_tree


def test_own_tree_kill_skips_the_tracker() -> None:
    """Engine.shutdown's kill of this process's tree skips the tracker; wrapping is idempotent."""
    resource_tracker.ensure_running()
    assert H.tracker_pid() is not None
    calls, kill = _recorder()
    wrapped = H.spare_tracker(kill)
    assert H.spare_tracker(wrapped) is wrapped
    wrapped(os.getpid(), include_parent=False, wait_timeout=60)
    wrapped(None)
    assert calls == [
        (os.getpid(), False, H.tracker_pid(), 60),
        (None, True, H.tracker_pid(), None),
    ]


def test_other_kills_are_unchanged() -> None:
    """Another process's tree, or an explicit skip_pid, passes through untouched."""
    resource_tracker.ensure_running()
    calls, kill = _recorder()
    wrapped = H.spare_tracker(kill)
    wrapped(os.getpid() + 100_000, wait_timeout=60)
    wrapped(os.getpid(), include_parent=False, skip_pid=1234)
    assert calls == [(os.getpid() + 100_000, True, None, 60), (os.getpid(), False, 1234, None)]
