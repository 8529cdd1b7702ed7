"""Times specfsm's SGLang hooks in an engine's scheduler process (benchmarks/hook_cost.py).

Loaded at interpreter start through ``PYTHONPATH`` in every process of the engine; it acts only
where ``HOOK_TIMING_OUT`` names a folder and specfsm is configured. Each hook of
``specfsm_sglang.hooks`` is replaced, before the plugin registers them, by one that adds its
own time (an AROUND hook's minus the SGLang call it wraps) to a per-hook total; the totals are
written to ``HOOK_TIMING_OUT/hooks-<pid>.json`` whenever the scheduler goes idle.

A PLAIN step and a deferred prefill call the target worker's forward themselves, not through
the wrapped SGLang call, so the target's forwards a hook calls are taken out of its own time
too (``TpModelWorker.forward_batch_generation``, timed only outside the wrapped call, where
the speculative worker's own forward would count it twice). ``in_deferred_prefill`` is the
part of ``_around_forward`` spent in `specfsm_sglang.deferred_prefill.forward` (a prefill
while PLAIN), its target forward taken out: the host time such a prefill adds.
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


#: [inside a wrapped SGLang call (depth), ns of target forwards a hook called itself]
_STATE = [0, 0]


def install_target(worker_cls: Any) -> None:
    """Time the target worker's forwards that a hook calls itself (outside a wrapped call)."""
    orig = worker_cls.forward_batch_generation

    def fwd(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _STATE[0]:
            return orig(self, *args, **kwargs)
        t = time.perf_counter_ns()
        try:
            return orig(self, *args, **kwargs)
        finally:
            _STATE[1] += time.perf_counter_ns() - t

    worker_cls.forward_batch_generation = fwd


def install(hooks: Any, out: str, deferred: Any = None) -> dict[str, list[int]]:
    """Wrap `hooks`' functions (and ``deferred``'s ``forward``, the deferred-prefill module,
    where given); returns the totals, name -> [calls, ns of their own]."""
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
                _STATE[0] += 1
                try:
                    return orig(*a, **k)
                finally:
                    _STATE[0] -= 1
                    inner[0] += time.perf_counter_ns() - t

            t0, target0 = time.perf_counter_ns(), _STATE[1]
            try:
                return fn(call, *args, **kwargs)
            finally:
                count(time.perf_counter_ns() - t0 - inner[0] - (_STATE[1] - target0))

        return wrapper

    def part(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def inside(*args: Any, **kwargs: Any) -> Any:
            t0, target0 = time.perf_counter_ns(), _STATE[1]
            try:
                return fn(*args, **kwargs)
            finally:
                a = acc.setdefault(name, [0, 0])
                a[0] += 1
                a[1] += time.perf_counter_ns() - t0 - (_STATE[1] - target0)

        return inside

    for name, around in HOOKS:
        setattr(hooks, name, timed(name, getattr(hooks, name), around))
    if deferred is not None:
        deferred.forward = part("in_deferred_prefill", deferred.forward)
    return acc


_OUT = os.environ.get("HOOK_TIMING_OUT")
if _OUT and os.environ.get("SPECFSM_CONFIG_JSON"):
    try:
        import specfsm_sglang.deferred_prefill as _deferred
        import specfsm_sglang.hooks as _hooks
        from sglang.srt.managers.tp_worker import TpModelWorker

        install_target(TpModelWorker)
        install(_hooks, _OUT, _deferred)
    except Exception as exc:  # a measurement must never stop the engine: said, then off
        print(f"[hook-timing] not installed: {type(exc).__name__}: {exc}", flush=True)
