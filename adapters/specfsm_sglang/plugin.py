"""The specfsm SGLang plugin (entry point ``sglang.srt.plugins: specfsm``).

SGLang's ``load_plugins()`` calls :func:`load` once per process (engine, scheduler ranks,
detokenizer) before its ``HookRegistry.apply_hooks()``. Each concern registers its part in
its own function below.
"""

from __future__ import annotations

import os


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

    A refused configuration must never let the server run without specfsm, and must say why in
    one line before any SGLang worker starts. The engine's parent checks everything at each
    engine start (`hooks.launch_check`, registered always: a later engine in the same process
    may ask for specfsm) and refuses there: ``specfsm: refusing to start: <key>: <reason>``.
    SGLang's plugin loader only logs an exception raised here, so in the workers a refusal
    is also registered as a hook that raises in every scheduler's __init__ (the fallback).
    """
    from specfsm_sglang import config, hooks

    hooks.register_launch_check()
    if not config.requested():
        return
    try:
        cfg = config.resolve()
    except config.ConfigError as exc:
        hooks.register_refusal(exc)
        return
    hooks.register(cfg)


def load() -> None:
    """Plugin entry point."""
    _enable_cpu_if_requested()
    _enable_specfsm_if_requested()
