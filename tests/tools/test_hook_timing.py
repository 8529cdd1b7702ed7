"""The hook-timing shim of benchmarks/hook_cost.py: each hook is replaced by one that adds its
own time to a total (an AROUND hook's without the SGLang call it wraps) and still returns what
the hook returns; the totals are written when the scheduler goes idle."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SHIM = Path(__file__).resolve().parents[2] / "benchmarks" / "hook_timing" / "sitecustomize.py"


def _shim() -> Any:
    spec = importlib.util.spec_from_file_location("hook_timing_shim", SHIM)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # no HOOK_TIMING_OUT here: it installs nothing by itself
    return mod


def test_hooks_are_timed_without_the_sglang_call_they_wrap(tmp_path: Path) -> None:
    def around(orig: Any, *args: Any) -> Any:
        return orig(*args) + 1

    def after(result: Any, *args: Any) -> None:
        return None

    shim = _shim()
    hooks = SimpleNamespace(**{name: after for name, around_ in shim.HOOKS if not around_})
    hooks._around_forward = around
    hooks._around_resolve_tokens = around
    acc = shim.install(hooks, str(tmp_path))

    def slow_sglang_call(x: int) -> int:
        time.sleep(0.05)
        return x

    assert hooks._around_forward(slow_sglang_call, 41) == 42
    assert hooks._after_process_result(None) is None
    calls, ns = acc["_around_forward"]
    assert calls == 1 and ns < 0.02e9  # the 50 ms inside SGLang's call are not the hook's
    assert not list(tmp_path.glob("hooks-*.json"))
    hooks._after_idle(None)
    (written,) = tmp_path.glob("hooks-*.json")
    got = json.loads(written.read_text())
    assert got["_around_forward"][0] == 1 and got["_after_process_result"][0] == 1


def test_target_forwards_a_hook_calls_itself_are_not_its_time(tmp_path: Path) -> None:
    """A PLAIN step and a deferred prefill call the target worker's forward themselves: that
    forward is not hook time, and the deferred prefill's own part is counted apart."""
    shim = _shim()

    class Worker:
        def forward_batch_generation(self, batch: Any) -> Any:
            time.sleep(0.05)
            return batch

    shim.install_target(Worker)
    worker = Worker()

    def deferred_forward(batch: Any) -> Any:
        return worker.forward_batch_generation(batch)

    def around(orig: Any, batch: Any) -> Any:
        if batch == "prefill":
            return deferred.forward(batch)
        return orig(batch)

    deferred = SimpleNamespace(forward=deferred_forward)
    hooks = SimpleNamespace(**{name: around for name, _ in shim.HOOKS})
    acc = shim.install(hooks, str(tmp_path), deferred)
    assert hooks._around_forward(worker.forward_batch_generation, "decode") == "decode"
    assert hooks._around_forward(lambda b: b, "prefill") == "prefill"
    calls, ns = acc["_around_forward"]
    assert calls == 2 and ns < 0.02e9  # neither 50 ms forward is the hook's
    calls, ns = acc["in_deferred_prefill"]
    assert calls == 1 and ns < 0.02e9
