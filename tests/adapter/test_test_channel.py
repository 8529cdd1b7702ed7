"""The test bed's test channel (a test-only plugin) through the controller's extension points,
without an engine: inject.json in, counters-rank{N}.json out, the fault injector."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang import hooks
from specfsm_sglang.controller import Controller
from specfsm_testbed import channel

from specfsm import Contracts, Event, FixedPolicy, Mode, ModeActionError, Observation, SpecFSM
from specfsm.fsm.testing import RecordingActions, capturing_log


def controller(tmp_path: Path) -> tuple[Controller, channel.TestChannelExtension]:
    """A Controller with only what the channel uses, built through the extension protocol."""
    ctl: Any = Controller.__new__(Controller)
    log, _ = capturing_log()
    ext = channel.TestChannelExtension(str(tmp_path))
    ctl.rank, ctl.iteration, ctl.spec_tokens, ctl.contract_ns = 0, 0, 4, 0
    ctl.action_failures = ctl.control_polls = ctl.control_poll_max_ns = 0
    ctl.observers = []
    ctl.contracts = Contracts({m: () for m in Mode})
    ctl._policy_faults_seen = 0
    ctl.metrics = None
    ctl.fsm = SpecFSM(FixedPolicy(True), ext.wrap_actions(ctl, RecordingActions()), log=log)
    ctl.fsm.listeners.append(ctl._on_transition)
    ext.attach(ctl)
    return ctl, ext


def counters(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "counters-rank0.json").read_text()))


def test_load_is_a_no_op_without_the_test_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without SPECFSM_TEST_DIR the plugin registers nothing (production never sees it)."""
    monkeypatch.delenv(channel.TEST_DIR_ENV, raising=False)
    before = list(hooks._extensions)
    channel.load()
    assert hooks._extensions == before


def test_injected_failure_and_counters(tmp_path: Path) -> None:
    """fail={"exit_speculating": 1} makes that action raise once: the machine goes to PLAIN,
    and the counters written after the transition name it with every key the tests read."""
    ctl, ext = controller(tmp_path)
    (tmp_path / "inject.json").write_text(json.dumps({"fail": {"exit_speculating": 1}}))
    assert ext.channel is not None
    ext.channel.before_decide(ctl, None)
    obs = Observation(iteration=1, decode_bs=1)
    with pytest.raises(ModeActionError):
        ctl.fsm.process_event(Event.LOAD_HIGH, obs, "test")
    assert ctl.fsm.mode is Mode.PLAIN
    c = counters(tmp_path)
    assert c["transitions"] == {"SPECULATING->PLAIN": 1}
    assert c["mode"] == "PLAIN" and c["failed"] is False and c["rank"] == 0
    for key in (
        "decode_forwards",
        "wide_forwards",
        "mode_forwards",
        "idle_checks",
        "contract_checks",
        "contract_ns",
        "policy_faults",
        "action_failures",
        "control_polls",
        "control_poll_max_ns",
        "iteration",
    ):
        assert key in c, key


def test_stale_injection_corrupts_the_next_batch_only(tmp_path: Path) -> None:
    """stale_spec_info=1 turns one batch's bs-row bonus_tokens into bs x K rows, once."""
    import torch

    ctl, ext = controller(tmp_path)
    assert ext.channel is not None
    (tmp_path / "inject.json").write_text(json.dumps({"stale_spec_info": 1}))
    os.utime(tmp_path / "inject.json", (1.0, 1.0))
    ext.channel.before_decide(ctl, None)
    batch = SimpleNamespace(spec_info=SimpleNamespace(bonus_tokens=torch.arange(3)))
    ext.channel.before_check(ctl, batch, Mode.PLAIN)
    assert batch.spec_info.bonus_tokens.shape == (12,)
    ext.channel.before_check(ctl, batch, Mode.PLAIN)
    assert batch.spec_info.bonus_tokens.shape == (12,)
