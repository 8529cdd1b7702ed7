"""The specfsm SGLang plugin (entry point ``sglang.srt.plugins: specfsm``).

SGLang's ``load_plugins()`` calls :func:`load` once per process (engine, scheduler ranks,
detokenizer) before its ``HookRegistry.apply_hooks()``. Each concern registers its part in
its own function below.
"""

from __future__ import annotations

import os
import sys


def _enable_cpu_if_requested() -> None:
    """The CPU test bed (``SPECFSM_SGLANG_CPU=1``): torch_native EAGLE draft/verify, overlap on
    CPU. A no-op otherwise, so a GPU server never gets it. Failures end the process loudly
    (SGLang's plugin loader would only log an exception)."""
    if os.environ.get("SPECFSM_SGLANG_CPU") != "1":
        return
    from specfsm_sglang import cpu

    cpu.enable()


def _enable_specfsm_if_requested() -> None:
    """specfsm itself, when any of SPECFSM_CONFIG / SPECFSM_CONFIG_JSON / SPECFSM_POLICY is set.

    A refused or broken configuration must never let the server run without specfsm. SGLang's
    plugin loader only logs an exception raised here, so a failure is turned into a hook that
    raises in every scheduler's __init__ (the engine's start-up then fails with the reason),
    and is also printed to stderr at once.
    """
    from specfsm_sglang import config

    if not config.requested():
        return
    from specfsm_sglang import hooks

    try:
        cfg = config.resolve()
        hooks.register(cfg)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        sys.stderr.write(f"specfsm: refusing to start: {reason}\n")
        hooks.register_refusal(reason)


def load() -> None:
    """Plugin entry point."""
    _enable_cpu_if_requested()
    _enable_specfsm_if_requested()
