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


def load() -> None:
    """Plugin entry point."""
    _enable_cpu_if_requested()
