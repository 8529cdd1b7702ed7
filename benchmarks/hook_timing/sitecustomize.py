"""Times specfsm's SGLang hooks in an engine's scheduler process (benchmarks/hook_cost.py).

Loaded at interpreter start through ``PYTHONPATH`` in every process of the engine; it acts only
where ``HOOK_TIMING_OUT`` names a folder and specfsm is configured. Each hook of
``specfsm_sglang.hooks`` is replaced, before the plugin registers them, by one that adds its
own time (an AROUND hook's minus the SGLang call it wraps) to a per-hook total; the totals are
written to ``HOOK_TIMING_OUT/hooks-<pid>.json`` whenever the scheduler goes idle.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

#: (hook name in specfsm_sglang.hooks, whether it wraps SGLang's call)
HOOKS = (
    ("_around_forward", True),
    ("_around_resolve_tokens", True),
    ("_after_verify_complete", False),
    ("_after_next_batch", False),
    ("_after_process_result", False),
    ("_after_trivial_verify", False),
    ("_after_idle", False),
)


def install(hooks: Any, out: str) -> dict[str, list[int]]:
    """Wrap `hooks`' functions; returns the totals, name -> [calls, ns of their own]."""
    acc: dict[str, list[int]] = {}

    def dump() -> None:
        path = os.path.join(out, f"hooks-{os.getpid()}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(acc, fh)
        os.replace(path + ".tmp", path)

    def timed(name: str, fn: Callable[..., Any], around: bool) -> Callable[..., Any]:
        def count(ns: int) -> None:
            a = acc.setdefault(name, [0, 0])
            a[0] += 1
            a[1] += ns

        if not around:

            def after(*args: Any, **kwargs: Any) -> Any:
                t0 = time.perf_counter_ns()
                try:
                    return fn(*args, **kwargs)
                finally:
                    count(time.perf_counter_ns() - t0)
                    if name == "_after_idle":
                        dump()

            return after

        def wrapper(orig: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            inner = [0]

            def call(*a: Any, **k: Any) -> Any:
                t = time.perf_counter_ns()
                try:
                    return orig(*a, **k)
                finally:
                    inner[0] += time.perf_counter_ns() - t

            t0 = time.perf_counter_ns()
            try:
                return fn(call, *args, **kwargs)
            finally:
                count(time.perf_counter_ns() - t0 - inner[0])

        return wrapper

    for name, around in HOOKS:
        setattr(hooks, name, timed(name, getattr(hooks, name), around))
    return acc


_OUT = os.environ.get("HOOK_TIMING_OUT")
if _OUT and os.environ.get("SPECFSM_CONFIG_JSON"):
    try:
        import specfsm_sglang.hooks as _hooks

        install(_hooks, _OUT)
    except Exception as exc:  # a measurement must never stop the engine: said, then off
        print(f"[hook-timing] not installed: {type(exc).__name__}: {exc}", flush=True)
