"""The SGLang CPU test bed for the tests under tests/cpu.

Boots the test bed in the pytest process at collection time (before any test imports
``sglang.srt``): ``SPECFSM_SGLANG_CPU=1`` (inherited by every process an engine spawns, whose
``specfsm_cpu_boot.pth`` then boots them), ``SGLANG_USE_CPU_ENGINE=1``,
``TORCHDYNAMO_DISABLE=1`` and the import-only stubs. Requires the project's environment
(``scripts/bootstrap.sh``); without torch / sglang the tests here are skipped.
"""

from __future__ import annotations

import importlib.util
import os

if importlib.util.find_spec("torch") and importlib.util.find_spec("sglang"):
    os.environ["SPECFSM_SGLANG_CPU"] = "1"
    from specfsm_cpu import boot as cpu_boot

    cpu_boot.boot()

from _cpu_testbed import hf_reference, nospec_outputs  # noqa: F401  (shared fixtures)
