"""Interpreter-start boot of the SGLang CPU test bed.

``specfsm_cpu_boot.pth`` (installed into site-packages) calls :func:`boot` in EVERY Python
process when ``SPECFSM_SGLANG_CPU=1``, including SGLang's spawned scheduler and detokenizer
processes. That is the only hook early enough: SGLang imports ``sgl_kernel`` / ``torchvision``
users before its plugin loader runs (the engine imports the scheduler module first, and the
spawned scheduler imports them before ``load_plugins()``).

Only what must precede any ``sglang.srt`` import lives here: the version pin, the environment
(``SGLANG_USE_CPU_ENGINE``, ``TORCHDYNAMO_DISABLE``) and the import-only stubs. Behaviour
patches that are used after start-up go through SGLang's ``HookRegistry`` from the test bed's
plugin (:mod:`specfsm_cpu.plugin` -> :func:`specfsm_cpu.enable`).

This module imports no torch / sglang at import time so that the boot stays cheap in processes
that never touch SGLang.
"""

from __future__ import annotations

import os
import sys

#: The only SGLang release the CPU enablement was written against (file:line references in
#: ``specfsm_cpu`` point into this release).
SUPPORTED_SGLANG_VERSION = "0.5.23"

ENV_FLAG = "SPECFSM_SGLANG_CPU"

_booted = False


def requested() -> bool:
    """True when the CPU test bed was asked for (``SPECFSM_SGLANG_CPU=1``)."""
    return os.environ.get(ENV_FLAG) == "1"


def installed_sglang_version() -> str | None:
    """Version of the installed ``sglang`` distribution (without importing it), or None."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def fail_loudly(message: str, code: int = 3) -> None:
    """Write ``message`` to stderr and end the process at once.

    Used where an exception would be swallowed: SGLang's plugin loader and ``HookRegistry`` only
    log a plugin's exceptions, and ``site`` only prints a ``.pth`` line's exception and goes on.
    ``os._exit`` also ends SGLang's spawned children, whose parent then reports the dead child.
    """
    sys.stderr.write(f"\n[specfsm] FATAL: {message}\n")
    sys.stderr.flush()
    os._exit(code)


def check_sglang_version() -> None:
    """Refuse to run the CPU enablement against any SGLang but 0.5.23 (exit with a message)."""
    found = installed_sglang_version()
    if found != SUPPORTED_SGLANG_VERSION:
        fail_loudly(
            f"{ENV_FLAG}=1 asks for the specfsm SGLang CPU test bed, which supports only "
            f"sglang=={SUPPORTED_SGLANG_VERSION}, but found sglang=={found}. Its CPU ops, "
            "attention patches and hook targets are ports of that release's code; re-check them "
            "(docs/sglang-cpu.md, 'On upgrade') before changing SUPPORTED_SGLANG_VERSION. "
            f"Unset {ENV_FLAG} to run without the test bed."
        )


def boot() -> None:
    """Pin check, environment, import-only stubs. Idempotent; a no-op unless requested."""
    global _booted
    if _booted or not requested():
        return
    check_sglang_version()
    # Without it sglang.srt.utils.common.is_cpu() is False (common.py:221-224) and the GPU
    # (Triton) paths are taken.
    os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
    # Without it inductor compiles C++ for SGLang's @torch.compile(dynamic=True) helpers
    # (e.g. speculative/spec_utils.py) for each new batch size: warm-up 37.5 s instead of ~1 s.
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
    from specfsm_cpu import stubs

    stubs.install()
    _booted = True
