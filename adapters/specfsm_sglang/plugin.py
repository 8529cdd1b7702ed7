"""The specfsm SGLang plugin (entry point ``sglang.srt.plugins: specfsm``).

SGLang's ``load_plugins()`` calls :func:`load` once per process (engine, scheduler ranks,
detokenizer) before its ``HookRegistry.apply_hooks()``. The CPU test bed and the test
channel are separate plugins of the ``specfsm-testbed`` distribution (``specfsm_cpu``,
``specfsm_test``), never installed with specfsm.
"""

from __future__ import annotations


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
    _enable_specfsm_if_requested()
