"""The CPU test bed's SGLang plugin (entry point ``sglang.srt.plugins: specfsm_cpu``).

SGLang's ``load_plugins()`` calls :func:`load` once per process. With ``SPECFSM_SGLANG_CPU=1``
it registers and applies the test bed's hooks (:func:`specfsm_cpu.enable`: torch_native EAGLE
draft/verify, overlap on CPU); otherwise it does nothing, so a GPU server never gets them. The
specfsm plugin knows nothing of the CPU bed; the order the two plugins load in does not matter
(they hook different targets, and :func:`specfsm_cpu.enable` applies its hooks at once).
Failures end the process loudly (SGLang's plugin loader would only log an exception).
"""

from __future__ import annotations

from specfsm_cpu import boot


def load() -> None:
    """Plugin entry point: a no-op unless SPECFSM_SGLANG_CPU=1."""
    if not boot.requested():
        return
    import specfsm_cpu

    specfsm_cpu.enable()
