"""The control file: read only when a changed regular file under the size limit; its content
checked with the config's schema; every refusal logged as one specfsm.config line."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang.config import resolve
from specfsm_sglang.control import MAX_CONTROL_BYTES, ControlFile
from specfsm_sglang.controller import Controller

from specfsm import Event, FixedPolicy, Mode, Observation, SpecFSM, ThresholdPolicy
from specfsm.fsm.testing import RecordingActions, capturing_log


def controller(path: Path | str) -> tuple[Controller, list[Any]]:
    """A Controller with only what the control path uses (no SGLang worker)."""
    ctl = Controller.__new__(Controller)
    log, lines = capturing_log()
    ctl.control_file = str(path)
    ctl._control = ControlFile(str(path))
    ctl.rank = 0
    ctl.iteration = 0
    ctl.tp_group = None
    ctl.log = log
    ctl.cfg = resolve({"SPECFSM_POLICY": "threshold:high=9,low=2"})
    ctl.policy_spec, ctl.profile_path, ctl.profile_rows = ctl.cfg.policy, None, []  # no profile
    ctl.topk, ctl.spec_steps, ctl.spec_tokens = 1, 3, 4
    ctl.fsm = SpecFSM(FixedPolicy(True), RecordingActions(), log=log)
    ctl.configured_policy, ctl.configured_active = None, False  # built by the first unpin
    ctl.holding = False
    return ctl, lines


def refusals(lines: list[Any]) -> list[str]:
    return [x["reason"] for x in lines if x.get("control") == "refused"]


def timed_poll(ctl: Controller) -> float:
    t0 = time.perf_counter()
    ctl._poll_control()
    return time.perf_counter() - t0


def test_fifo_without_writer_is_refused_not_opened(tmp_path: Path) -> None:
    """A FIFO with no writer (open() would block forever) is refused in one line, at once."""
    fifo = tmp_path / "control.json"
    os.mkfifo(fifo)
    ctl, lines = controller(fifo)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (ctl._poll_control(), done.set()), daemon=True)
    worker.start()
    assert done.wait(2.0), "the poll blocked on the FIFO"
    for _ in range(5):
        assert timed_poll(ctl) < 0.01
    (reason,) = refusals(lines)
    assert "is a FIFO (named pipe), not a regular file; it is not opened" in reason


@pytest.mark.parametrize("kind", ["directory", "device", "oversized", "not-json"])
def test_other_refusals(tmp_path: Path, kind: str) -> None:
    """A directory, a device, an oversized file and non-JSON text: one refusal line each."""
    path: Path | str = tmp_path / "control.json"
    if kind == "directory":
        Path(path).mkdir()
        want = "is a directory"
    elif kind == "device":
        path = "/dev/null"
        want = "is a character device"
    elif kind == "oversized":
        Path(path).write_text(" " * (MAX_CONTROL_BYTES + 1))
        want = f"more than the limit of {MAX_CONTROL_BYTES}"
    else:
        Path(path).write_text("{pin: PLAIN}")
        want = "is not JSON"
    ctl, lines = controller(path)
    for _ in range(3):
        ctl._poll_control()
    assert len(refusals(lines)) == 1 and want in refusals(lines)[0]
    assert ctl.fsm.policy.describe() == {"policy": "fixed", "speculate": True}


def test_read_only_when_changed(tmp_path: Path) -> None:
    """A regular file is applied once per change (mtime, size, inode), not once per poll."""
    path = tmp_path / "control.json"
    ctl, lines = controller(path)
    ctl._poll_control()  # absent: nothing
    path.write_text(json.dumps({"pin": "PLAIN"}))
    for _ in range(3):
        ctl._poll_control()
    applied = [x for x in lines if x.get("control") == "applied"]
    assert len(applied) == 1 and isinstance(ctl.fsm.policy, FixedPolicy)
    assert ctl.fsm.policy.speculate is False
    tmp = tmp_path / "new.json"
    tmp.write_text(json.dumps({"pin": None}))
    os.replace(tmp, path)
    ctl._poll_control()
    assert isinstance(ctl.fsm.policy, ThresholdPolicy)  # unpinned: the configured policy


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ([1, 2], "control: expected a JSON object"),
        (3, "control: expected a JSON object"),
        ("PLAIN", "control: expected a JSON object"),
        (None, 'control: expected a JSON object ({"pin"'),
        ({}, "control: empty"),
        ({"pin": "PLAIN", "policy": {"name": "fixed", "speculate": True}}, "not both"),
        ({"pin": "DRAINING"}, 'control.pin: expected "SPECULATING" or "PLAIN"'),
        ({"pin": "PLAIN", "note": "x"}, "control.note: unknown configuration keys ['note']"),
        ({"policy": {"name": "threshold", "high": "9", "low": 1}}, "control.policy.high"),
        (
            {"policy": {"name": "goodput", "shape": "tree", "accept_len": 2.0}},
            "control.policy.shape: the goodput policy is priced for tree",
        ),
    ],
)
def test_content_checked_with_the_schema(content: Any, reason: str) -> None:
    """Lists, numbers, strings, null, both pin and policy, unknown fields, bad values and a
    goodput policy of another shape are refused (logged), and the policy is unchanged."""
    ctl, lines = controller("/nonexistent")
    ctl.apply_control(content)
    (got,) = refusals(lines)
    assert reason in got
    (line,) = [x for x in lines if x.get("control") == "refused"]
    assert line["request"] == content and line["event"] == "specfsm.config"
    assert ctl.fsm.policy.describe() == {"policy": "fixed", "speculate": True}


def test_swap_policy_back_after_replacement() -> None:
    """After faults replaced the policy by fixed PLAIN, the operator swaps one back in."""

    class Raises(FixedPolicy):
        def decide(self, mode: Mode, obs: Observation) -> Event | None:
            raise RuntimeError("boom")

    ctl, lines = controller("/nonexistent")
    ctl.fsm.policy = Raises(True)
    for i in range(3):
        ctl.fsm.step(Observation(iteration=i, decode_bs=1))
    assert ctl.fsm.mode is Mode.PLAIN and ctl.fsm.policy.describe()["speculate"] is False
    ctl.apply_control({"policy": {"name": "fixed", "speculate": True}})
    assert [x["control"] for x in lines if "control" in x] == ["applied"]
    ctl.fsm.step(Observation(iteration=3, decode_bs=1))
    assert ctl.fsm.mode is Mode.RESYNCING


def test_unpin_resumes_the_configured_policy_with_what_it_learned() -> None:
    """A pin and a swap leave the configured policy's instance aside; the unpin puts that same
    instance back (its learned state with it) and says so; a policy the machine replaced
    after faults is built afresh by the next unpin."""
    ctl, lines = controller("/nonexistent")
    ctl.apply_control({"pin": None})
    configured = ctl.fsm.policy
    assert isinstance(configured, ThresholdPolicy) and ctl.configured_policy is configured
    for content in ({"pin": "PLAIN"}, {"policy": {"name": "fixed", "speculate": True}}):
        ctl.apply_control(content)
        assert ctl.fsm.policy is not configured
        ctl.apply_control({"pin": None})
        assert ctl.fsm.policy is configured
    resumed = [x["resumed"] for x in lines if x.get("control") == "applied" and "resumed" in x]
    assert resumed == [False, True, True]

    class Raises(ThresholdPolicy):
        def decide(self, mode: Mode, obs: Observation) -> Event | None:
            raise RuntimeError("boom")

    faulty = Raises(high=9, low=2)
    ctl.fsm.policy = ctl.configured_policy = faulty
    for i in range(3):
        ctl.fsm.step(Observation(iteration=i, decode_bs=1))
    assert ctl.fsm.policy is not faulty  # replaced by fixed PLAIN after its faults
    ctl.apply_control({"pin": "SPECULATING"})
    ctl.apply_control({"pin": None})
    assert isinstance(ctl.fsm.policy, ThresholdPolicy) and ctl.fsm.policy is not faulty
    assert lines[-1]["resumed"] is False


def test_a_change_waits_for_the_start_up_profile(tmp_path: Path) -> None:
    """A pin written before or during the start-up profile is not read while the profile's
    schedule decides (it would stop the schedule, and the profile's end would undo it); the
    first poll after the profile applies it."""
    path = tmp_path / "control.json"
    path.write_text(json.dumps({"pin": "PLAIN"}))
    ctl, lines = controller(path)
    schedule = FixedPolicy(True)
    with ctl.installed(schedule):
        for _ in range(3):
            ctl._poll_control()
        assert ctl.fsm.policy is schedule and not [x for x in lines if "control" in x]
    ctl._poll_control()
    assert isinstance(ctl.fsm.policy, FixedPolicy) and ctl.fsm.policy.speculate is False
    assert [x["control"] for x in lines if "control" in x] == ["applied"]
