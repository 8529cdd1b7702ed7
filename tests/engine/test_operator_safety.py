"""The server keeps serving whatever the operator does: a raising / garbage / wrong-event
policy goes to PLAIN (replaced after 3 faults, swappable back), and a FIFO as the control file
does not stall a decode step (one real CPU engine for the module)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine
PROMPTS = E.default_prompts(3, seed=14)


@pytest.fixture(scope="module")
def eng(module_dir: Path) -> Iterator[Any]:
    """A chain EAGLE-3 engine whose configured policy raises on every decide."""
    engine = F.make_fsm_engine(
        module_dir,
        policy={"name": "_operator_policies:Raising"},
        config={"control_every": 1},
        spec="EAGLE3",
    )
    try:
        yield engine
    finally:
        engine.shutdown()


def lines(test_dir: Path, event: str) -> list[dict[str, Any]]:
    return [x for x in F.transitions(test_dir) if x.get("event") == event]


def test_bad_policies_fault_to_plain_and_keep_serving(
    eng: Any, module_dir: Path, reference: Any
) -> None:
    """Raising, string-returning and completion-event policies each fault 3 times (one
    policy_failed line each), are replaced by fixed PLAIN, and serve reference tokens; a good
    policy swapped in through the control channel speculates again."""
    want = reference(PROMPTS, 16)
    assert E.generate_greedy(eng, PROMPTS, 16) == want
    c = F.counters(module_dir, wait_s=5)
    assert (c["mode"], c["policy_faults"], c["failed"]) == ("PLAIN", 3, False)
    for n, name in enumerate(["Garbage", "WrongEvent"], start=2):
        F.set_policy(module_dir, {"name": f"_operator_policies:{name}"})
        F.set_policy(module_dir, {"name": f"_operator_policies:{name}"})
        assert E.generate_greedy(eng, PROMPTS, 16) == want
        c = F.counters(module_dir, wait_s=5)
        assert (c["mode"], c["policy_faults"]) == ("PLAIN", 3 * n), c
    F.set_policy(module_dir, {"name": "fixed", "speculate": True})
    assert E.generate_greedy(eng, PROMPTS, 16) == want
    c = F.counters(module_dir, wait_s=5)
    assert c["mode"] == "SPECULATING" and c["policy_faults"] == 9
    failed = lines(module_dir, "specfsm.policy_failed")
    assert [x["policy"] for x in failed] == ["raising"] * 3 + ["garbage"] * 3 + ["wrongevent"] * 3
    assert "RuntimeError: policy bug" in failed[0]["error"]
    assert "returned str 'LOAD_HIGH', not an Event" in failed[3]["error"]
    assert "completion events come from the engine" in failed[6]["error"]
    assert len(lines(module_dir, "specfsm.policy_replaced")) == 3


def test_fifo_control_file_does_not_stall_serving(
    eng: Any, module_dir: Path, reference: Any
) -> None:
    """A FIFO with no writer as the control file (polled every decode forward) is refused in
    one line and never opened: no poll takes more than a few ms and serving goes on."""
    fifo = module_dir / "control.json"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)

    def unblock() -> None:  # only an opener blocked on the FIFO needs this
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.write(fd, b"{}")
            os.close(fd)
        except OSError:
            pass

    rescue = threading.Timer(60.0, unblock)
    rescue.start()
    try:
        t0 = time.monotonic()
        out = E.generate_greedy(eng, PROMPTS, 24)
        elapsed = time.monotonic() - t0
    finally:
        rescue.cancel()
    assert elapsed < 30.0 and out == reference(PROMPTS, 24)
    c = F.counters(module_dir, wait_s=5)
    assert c["control_polls"] >= 20  # one per decode forward (23 when run alone, in PLAIN)
    assert c["control_poll_max_ns"] < 5_000_000, c["control_poll_max_ns"]
    refused = [x for x in F.transitions(module_dir) if x.get("control") == "refused"]
    assert len(refused) == 1 and "is a FIFO (named pipe)" in refused[0]["reason"]
    print(
        f"FIFO control file: {c['control_polls']} polls, max {c['control_poll_max_ns'] / 1e3:.0f}"
        f" us; 3 x 24 tokens in {elapsed:.2f} s"
    )
    fifo.unlink()
    (module_dir / "control.json").write_text(json.dumps({"pin": "PLAIN"}))
    E.generate_greedy(eng, PROMPTS, 8)
    assert F.counters(module_dir, wait_s=5)["mode"] == "PLAIN"
