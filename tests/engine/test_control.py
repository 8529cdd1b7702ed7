"""Runtime control without a restart: pin a mode through the watched control file."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine


def test_pin_and_unpin_through_control_file(tmp_path: Path, reference: object) -> None:
    """Writing {"pin": "PLAIN"} moves the engine to PLAIN and keeps it there (logged as a
    specfsm.config control line); {"pin": null} returns to the configured policy."""
    prompts = E.default_prompts(3, seed=9)
    eng = F.make_fsm_engine(tmp_path, policy={"name": "fixed", "speculate": True}, spec="EAGLE3")
    try:
        E.generate_greedy(eng, prompts, 8)
        assert F.counters(tmp_path, wait_s=5)["mode"] == "SPECULATING"
        (tmp_path / "control.json").write_text(json.dumps({"pin": "PLAIN"}))
        out = E.generate_greedy(eng, prompts, 24)
        c1 = F.counters(tmp_path, wait_s=5)
        time.sleep(0.05)
        (tmp_path / "control.json").write_text(json.dumps({"pin": None}))
        out2 = E.generate_greedy(eng, prompts, 24)
        c2 = F.counters(tmp_path, wait_s=5)
    finally:
        eng.shutdown()
    assert out == out2 == reference(prompts, 24)  # type: ignore[operator]
    assert c1["mode"] == "PLAIN" and c2["mode"] == "SPECULATING"
    controls = [x for x in F.transitions(tmp_path) if x.get("control") == "applied"]
    assert [x["request"] for x in controls] == [{"pin": "PLAIN"}, {"pin": None}]
