"""The test channel: a TEST-ONLY SGLang plugin (entry point ``sglang.srt.plugins: specfsm_test``).

Loaded in every SGLang process like any plugin, it does nothing unless ``SPECFSM_TEST_DIR``
names a directory. Then it plugs into each rank's specfsm controller through the controller's
extension points (``hooks.add_extension``): it wraps the ModeActions with a fault injector and
adds an observer that

* reads ``inject.json`` (when its mtime changed) at the start of each decode forward:
  ``{"fail": {"enter_plain": 1}}`` makes that action raise that many times,
  ``{"stale_spec_info": n}`` corrupts the next n decode batches' ``bonus_tokens`` (a bs x K
  tensor where a bs-row one belongs: the seeds' bug class) just before the contracts check,
  ``{"control": {...}}`` applies a control-file change (``Controller.apply_control``);
* writes ``counters-rank{N}.json`` (atomically) after each transition, each fault, each
  processed decode result and, at most every 0.25 s, from the idle loop.

The counters also hold the draft model's forwards per mode (``draft_forwards_by_mode``,
counted at the draft runner, independently of specfsm) and, with zero-tax PLAIN, the lag
buffer's and the catch-up's own counters (``zero_tax``). ``SPECFSM_TEST_SKIP_CATCHUP=1`` makes
zero-tax RESYNCING skip its catch-up (a cold draft after re-entry: the catch-up's teeth).

``SPECFSM_TEST_KEEP_INT32_CANDIDATES=1`` (with the channel on) undoes specfsm's int64 fix of
the 1-wide verify's candidates, to reproduce the H200 crash it fixes
(tests/engine/test_int64_candidates.py). The helpers that write and read these files are in
:mod:`specfsm_testbed.fsm`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from specfsm_sglang import compat
from specfsm_sglang.controller import Controller, ControllerObserver

from specfsm import Mode, ModeActions, SpecFSMError, TransitionInfo, TransitionRecord

TEST_DIR_ENV = "SPECFSM_TEST_DIR"
#: "1": the 1-wide verify input keeps SGLang's int32 candidates (undoes specfsm's int64 fix)
KEEP_INT32_CANDIDATES_ENV = "SPECFSM_TEST_KEEP_INT32_CANDIDATES"
#: "1": zero-tax RESYNCING skips the catch-up (the draft re-enters cold, as SGLang's
#: SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND leaves it): the test that the catch-up has teeth
SKIP_CATCHUP_ENV = "SPECFSM_TEST_SKIP_CATCHUP"


class FaultInjector:
    """ModeActions that raise from chosen actions a chosen number of times, else delegate."""

    def __init__(self, inner: ModeActions) -> None:
        self.inner = inner
        self.fail: dict[str, int] = {}

    def _run(self, name: str, t: TransitionInfo) -> None:
        if self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise RuntimeError(f"injected failure in {name}")
        getattr(self.inner, name)(t)

    def enter_speculating(self, t: TransitionInfo) -> None:
        self._run("enter_speculating", t)

    def exit_speculating(self, t: TransitionInfo) -> None:
        self._run("exit_speculating", t)

    def reshape_speculating(self, t: TransitionInfo) -> None:
        self._run("reshape_speculating", t)

    def enter_draining(self, t: TransitionInfo) -> None:
        self._run("enter_draining", t)

    def exit_draining(self, t: TransitionInfo) -> None:
        self._run("exit_draining", t)

    def enter_plain(self, t: TransitionInfo) -> None:
        self._run("enter_plain", t)

    def exit_plain(self, t: TransitionInfo) -> None:
        self._run("exit_plain", t)

    def enter_resyncing(self, t: TransitionInfo) -> None:
        self._run("enter_resyncing", t)

    def exit_resyncing(self, t: TransitionInfo) -> None:
        self._run("exit_resyncing", t)


class TestChannel(ControllerObserver):
    """One rank's channel: commands in from inject.json, counters out."""

    __test__ = False  # not a pytest class

    def __init__(self, ctl: Controller, test_dir: str, injector: FaultInjector | None) -> None:
        self.ctl = ctl
        self.test_dir = test_dir
        self.injector = injector
        self._inject_mtime = 0.0
        self._stale_inject = 0
        self._idle_written = 0.0
        self.counters: dict[str, Any] = {
            "rank": ctl.rank,
            "decode_forwards": 0,
            "wide_forwards": 0,
            "transitions": {},
            "mode_forwards": {m.name: 0 for m in Mode},
            "action_failures": 0,
            "idle_checks": 0,
            "contract_checks": 0,
            "policy_faults": 0,
            "control_polls": 0,
            "control_poll_max_ns": 0,
        }

    # -------------------------------------------------------------- commands in
    def before_decide(self, ctl: Controller, batch: Any) -> None:
        path = os.path.join(self.test_dir, "inject.json")
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            return
        if mtime == self._inject_mtime:
            return
        self._inject_mtime = mtime
        cmd = json.loads(Path(path).read_text())
        if self.injector is not None:
            for name, n in cmd.get("fail", {}).items():
                self.injector.fail[name] = int(n)
        self._stale_inject = int(cmd.get("stale_spec_info", 0))
        if "control" in cmd:
            ctl.apply_control(cmd["control"])

    def before_check(self, ctl: Controller, batch: Any, mode: Mode) -> None:
        if not self._stale_inject:
            return
        info = batch.spec_info
        if info is None or getattr(info, "bonus_tokens", None) is None:
            return
        self._stale_inject -= 1
        info.bonus_tokens = info.bonus_tokens.repeat_interleave(ctl.spec_tokens)

    # -------------------------------------------------------------- counters out
    def on_decode(self, ctl: Controller, batch: Any, mode: Mode) -> None:
        c = self.counters
        c["decode_forwards"] += 1
        c["mode_forwards"][mode.value] += 1

    def after_forward(self, ctl: Controller, batch: Any, result: Any, wide: bool) -> None:
        if wide:
            self.counters["wide_forwards"] += 1

    def on_extend(self, ctl: Controller, batch: Any) -> None:
        """Requests prefilled (arrivals) per mode."""
        by = self.counters.setdefault("arrivals_by_mode", {m.name: 0 for m in Mode})
        by[ctl.fsm.mode.value] += len(batch.reqs)

    def on_result(self, ctl: Controller, batch: Any, result: Any) -> None:
        if batch.forward_mode.is_extend():
            return
        by = self.counters.setdefault("finished_by_mode", {m.name: 0 for m in Mode})
        by[ctl.fsm.mode.value] += sum(1 for r in batch.reqs if r.finished())
        self.write()  # tests read counters right after a request returns

    def on_transition(self, ctl: Controller, rec: TransitionRecord) -> None:
        key = f"{rec.src.value}->{rec.dst.value}"
        t = self.counters["transitions"]
        t[key] = t.get(key, 0) + 1
        self.write()

    def on_fault(self, ctl: Controller, exc: SpecFSMError) -> None:
        self.write()

    def on_idle(self, ctl: Controller) -> None:
        self.counters["idle_checks"] += 1
        now = time.monotonic()
        if now - self._idle_written >= 0.25:  # the idle loop may spin: throttle the writes
            self._idle_written = now
            self.write()

    def note_retracted(self, n: int) -> None:
        self.counters["retracted"] = self.counters.get("retracted", 0) + n

    def write(self) -> None:
        ctl = self.ctl
        c = dict(self.counters)
        c["action_failures"] = ctl.action_failures
        c["policy_faults"] = ctl.fsm.policy_faults
        c["control_polls"] = ctl.control_polls
        c["control_poll_max_ns"] = ctl.control_poll_max_ns
        c["mode"] = ctl.fsm.mode.value
        c["failed"] = ctl.fsm.failed
        c["iteration"] = ctl.iteration
        c["contract_ns"] = ctl.contract_ns
        c["contract_checks"] = ctl.contracts.checked
        zt = getattr(ctl, "zero_tax", None)
        if zt is not None:
            st = zt.stats
            c["zero_tax"] = {
                "plain_forwards": st.plain_forwards,
                "recorded_tokens": st.recorded_tokens,
                "catchups": st.catchups,
                "catchup_draft_forwards": st.draft_forwards,
                "caught_up_rows": st.caught_up_rows,
                "caught_up_tokens": st.caught_up_tokens,
                "overflow_rows": st.overflow_rows,
                "peak_lag": st.peak_lag,
                "catchup_s": st.catchup_s,
                "deferred_prefills": st.deferred_prefills,
                "deferred_rows": st.deferred_rows,
                "deferred_tokens": st.deferred_tokens,
                "prompt_caught_up_tokens": st.prompt_caught_up_tokens,
                "prompt_dropped_rows": st.prompt_dropped_rows,
                "prompt_dropped_tokens": st.prompt_dropped_tokens,
                "eager_prefills_store_full": st.eager_prefills_store_full,
                "store_peak_tokens": st.store_peak_tokens,
                "store_tokens": zt.store.used,
                # per catch-up (rows, tokens, seconds), the newest 64 (benchmarks/plain_tax.py)
                "catchup_history": [list(h) for h in list(st.history)[-64:]],
            }
        path = os.path.join(self.test_dir, f"counters-rank{ctl.rank}.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(c, f)
        os.replace(tmp, path)


class TestChannelExtension:
    """The ControllerExtension: a fault injector around the actions, a TestChannel observer,
    and (KEEP_INT32_CANDIDATES_ENV) the 1-wide verify's candidates back to int32."""

    __test__ = False

    def __init__(self, test_dir: str, keep_int32: bool = False, skip_catchup: bool = False) -> None:
        self.test_dir = test_dir
        self.keep_int32 = keep_int32
        self.skip_catchup = skip_catchup
        self.injector: FaultInjector | None = None
        self.channel: TestChannel | None = None

    def wrap_actions(self, ctl: Controller, actions: ModeActions) -> ModeActions:
        self.injector = FaultInjector(actions)
        return self.injector

    def attach(self, ctl: Controller) -> None:
        self.channel = TestChannel(ctl, self.test_dir, self.injector)
        ctl.observers.append(self.channel)
        if self.keep_int32:
            _keep_int32_candidates(ctl.worker)
        if getattr(ctl, "worker", None) is not None:  # a real rank (not a unit test's shell)
            _count_draft_forwards(ctl, self.channel)
        zt = getattr(ctl, "zero_tax", None)
        if self.skip_catchup and zt is not None:
            _skip_catchup(zt)


def _count_draft_forwards(ctl: Controller, channel: TestChannel) -> None:
    """Count the draft model's forwards per mode at its runner (an instance attribute around
    ``draft_runner.forward``): what a mode really costs in draft work, whoever asked for it."""
    runner = ctl.worker._draft_worker.draft_runner
    forward = runner.forward
    by = channel.counters.setdefault("draft_forwards_by_mode", {m.name: 0 for m in Mode})

    def counted(*args: Any, **kwargs: Any) -> Any:
        by[ctl.fsm.mode.value] += 1
        return forward(*args, **kwargs)

    runner.forward = counted


def _skip_catchup(zt: Any) -> None:
    """Zero-tax RESYNCING without its catch-up: the lag is dropped, the draft input stays the
    zeros PLAIN relayed (cold re-entry)."""

    def cold(batch: Any, *args: Any, **kwargs: Any) -> bool:
        zt.lag.reset([r for r in map(compat.req_pool_idx, batch.reqs) if r is not None])
        return True

    zt._catch_up = cold


def _keep_int32_candidates(worker: Any) -> None:
    """Wrap this worker's (already hooked) ``_build_trivial_verify_input`` so that its
    ``draft_token`` is int32 again, as SGLang builds it without specfsm's fix: the instance
    attribute sits outside every class-level hook, whatever order the plugins loaded in."""
    import torch

    build = worker._build_trivial_verify_input

    def build_int32(*args: Any, **kwargs: Any) -> Any:
        out = build(*args, **kwargs)
        draft = getattr(out, "draft_token", None)
        if draft is not None and draft.dtype != torch.int32:
            out.draft_token = draft.to(torch.int32)
        return out

    worker._build_trivial_verify_input = build_int32


def load() -> None:
    """Plugin entry point: a no-op unless SPECFSM_TEST_DIR is set."""
    test_dir = os.environ.get(TEST_DIR_ENV)
    if not test_dir:
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from specfsm_sglang import compat, hooks

    ext = TestChannelExtension(
        test_dir,
        keep_int32=os.environ.get(KEEP_INT32_CANDIDATES_ENV) == "1",
        skip_catchup=os.environ.get(SKIP_CATCHUP_ENV) == "1",
    )
    hooks.add_extension(ext)

    def after_retract(result: Any, *args: Any, **kwargs: Any) -> None:
        if ext.channel is not None and result:
            ext.channel.note_retracted(len(result[0]))

    HookRegistry.register(compat.surface_or_newest().batch_retract, after_retract, HookType.AFTER)
