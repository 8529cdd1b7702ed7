"""Keep multiprocessing's resource tracker alive through SGLang's engine shutdown (tests only).

``sglang.Engine.shutdown()`` ends with ``kill_process_tree(os.getpid(), include_parent=False)``
(sglang/srt/entrypoints/engine.py, 0.5.23), which SIGKILLs every descendant of the calling
process (``psutil.Process(pid).children(recursive=True)``, sglang/srt/utils/common.py). In a test
process that includes Python's resource tracker. A semaphore registered with the killed tracker
(tqdm's process-wide ``mp.RLock``, created while SGLang loads weights in the test process; the
``mp`` Queue of a test) is unregistered later through a relaunched tracker that never saw it:
``UserWarning: resource_tracker: process died unexpectedly, relaunching`` and, at interpreter
exit, ``KeyError: '/mp-...'`` tracebacks from ``resource_tracker.main`` after pytest's summary.

`spare_tracker` wraps the engine module's ``kill_process_tree`` so that, when it kills this
process's own tree and names no other pid to skip, it skips the tracker. Engines in the test
process come from ``specfsm_testbed.engine.make_engine``; `install` wraps that factory to
apply the patch once SGLang is imported (importing it earlier would precede the test bed's
``cpu.enable()``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from multiprocessing import resource_tracker
from typing import Any

ENGINE_MODULE = "sglang.srt.entrypoints.engine"


def tracker_pid() -> int | None:
    """This process's resource tracker, when it started one (None: none, or inherited)."""
    pid: int | None = getattr(resource_tracker._resource_tracker, "_pid", None)
    return pid


def spare_tracker(kill: Callable[..., Any]) -> Callable[..., Any]:
    """`kill` (SGLang's kill_process_tree) that leaves this process's resource tracker alive."""
    if getattr(kill, "__spares_tracker__", False):
        return kill

    @functools.wraps(kill)
    def kill_process_tree(parent_pid: int | None, *args: Any, **kwargs: Any) -> Any:
        own_tree = parent_pid is None or parent_pid == os.getpid()
        if own_tree and len(args) < 2 and kwargs.get("skip_pid") is None:
            kwargs["skip_pid"] = tracker_pid()
        return kill(parent_pid, *args, **kwargs)

    kill_process_tree.__spares_tracker__ = True  # type: ignore[attr-defined]
    return kill_process_tree


def patch_loaded_engine() -> None:
    """Apply `spare_tracker` to SGLang's engine module if it is imported."""
    mod = sys.modules.get(ENGINE_MODULE)
    if mod is not None and hasattr(mod, "kill_process_tree"):
        mod.kill_process_tree = spare_tracker(mod.kill_process_tree)


def install() -> None:
    """Wrap the test bed's make_engine so that every engine it starts spares the tracker."""
    from specfsm_testbed import engine

    make = engine.make_engine
    if getattr(make, "__spares_tracker__", False):
        return

    @functools.wraps(make)
    def make_engine(*args: Any, **kwargs: Any) -> Any:
        try:
            return make(*args, **kwargs)
        finally:
            patch_loaded_engine()

    make_engine.__spares_tracker__ = True  # type: ignore[attr-defined]
    engine.make_engine = make_engine
