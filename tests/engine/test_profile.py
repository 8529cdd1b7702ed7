"""The start-up profile in the real SGLang engine on CPU (config ``profile``): before the
engine reports ready it measures every shape's and PLAIN's step at each batch size through
SGLang's own event loop, writes the rows as a cost table and prices the goodput policy with
them; SGLang's idle memory check runs between its phases (a leaked KV slot would stop the
start-up); outputs afterwards are token-identical to no speculation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

from specfsm.model.acceptance import DraftShape, parse_shape
from specfsm.model.costs import CostModel, load_table, overlay_table, spec_step_model

pytestmark = pytest.mark.engine

BS = [1, 2]
CONFIGS: dict[str, dict[str, Any]] = {
    # chain server, overlap on, zero-tax PLAIN
    "chain-overlap": {
        "engine": {
            "tree": False,
            "overlap": True,
            "speculative_num_steps": 5,
            "speculative_num_draft_tokens": 6,
        },
        "launch": "chain5",
        "shapes": ["chain1", "chain3"],
        "plain": "zero_tax",
        "table": "h200_sglang0517_llama8b",
    },
    # tree server with a chain and a narrower tree, overlap off, warm PLAIN
    "tree-sync-warm": {
        "engine": {
            "tree": True,
            "overlap": False,
            "speculative_num_steps": 3,
            "speculative_num_draft_tokens": 8,
        },
        "launch": "4,3,8",
        "shapes": ["chain1", "4,2,8"],
        "plain": "warm",
        "table": "h200_sglang0517_llama8b",
    },
}
PROMPTS = E.default_prompts(5, seed=41)


@pytest.fixture(scope="module", params=list(CONFIGS))
def eng(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One engine per configuration, profiled at start-up."""
    c = CONFIGS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    policy = {
        "name": "goodput",
        "table": c["table"],
        "shape": c["launch"],
        "accept_len": 2.0,
        "shapes": [c["launch"], *c["shapes"]],
        "plain": c["plain"],
    }
    cfg = {
        "shapes": c["shapes"],
        "plain": c["plain"],
        "policy": policy,
        "profile": {
            "bs": BS,
            "forwards": 3,
            "prompt_tokens": 24,
            "save": str(d / "profile-{rank}.csv"),
        },
    }
    e = F.make_fsm_engine(d, config=cfg, spec="EAGLE3", **c["engine"])
    e.test_dir = d
    e.cfg = c
    yield e
    e.shutdown()


def _profile_line(test_dir: Path) -> dict[str, Any]:
    lines = [x for x in F.transitions(test_dir) if x.get("event") == "specfsm.config"]
    prof = [
        x
        for x in lines
        if "profile" in x and isinstance(x["profile"], dict) and "rows" in x["profile"]
    ]
    assert prof, "no profile line in the config log"
    return prof[0]


def test_profile_measures_every_shape_and_plain(eng: Any) -> None:
    """Every shape the engine built and PLAIN are measured at every batch size; the CSV is a
    cost table whose rows price those steps, and the policy now reads it."""
    line = _profile_line(eng.test_dir)
    prof = line["profile"]
    assert prof["skipped"] == [], prof
    phases = prof["phases"]
    assert phases[0].get("warm_up") and [p["bs"] for p in phases[1:]] == BS, phases
    assert all(p["complete"] for p in phases), phases
    path = Path(prof["path"])
    assert path == eng.test_dir / "profile-0.csv" and path.is_file()
    table = load_table(str(path))
    shapes = [parse_shape(eng.cfg["launch"]), *(parse_shape(s) for s in eng.cfg["shapes"])]
    plain_model = "plain_step" if eng.cfg["plain"] == "zero_tax" else "plain_warm_step"
    want = {spec_step_model(s) for s in shapes} | {plain_model}
    assert set(table.models) == want, table.models
    for m in want:
        assert table.batch_sizes(m) == BS, (m, table.batch_sizes(m))
    assert line["policy"]["profile"] == str(path)
    assert prof["seeded"] == len(table.rows), prof
    m = CostModel(overlay_table(load_table(eng.cfg["table"]), table), shapes[0])
    for s in shapes:
        assert m.unmeasured(s) == []
        assert m.spec_ms(2, s) == pytest.approx(
            table.ms(spec_step_model(s), 2, s.draft_tokens, table.contexts(spec_step_model(s))[0])
        )


def test_profile_walked_the_table(eng: Any) -> None:
    """The profile's transitions went through the table: RESHAPE to every shape, PLAIN and
    back, no fault; it ended in SPECULATING at the launch shape."""
    log = F.transitions(eng.test_dir)
    steps = [
        x
        for x in log
        if x.get("event") == "specfsm.transition"
        and str(x.get("reason", "")).startswith("start-up profile")
    ]
    reached = {x.get("shape_to") for x in steps if x.get("trigger") == "RESHAPE"}
    want = {DraftShape.label(parse_shape(s)) for s in eng.cfg["shapes"]}
    assert want <= reached, (want, reached)
    kinds = {(x["src"], x["dst"]) for x in steps}
    assert ("SPECULATING", "DRAINING") in kinds and ("PLAIN", "RESYNCING") in kinds, kinds
    assert not [x for x in log if x.get("event") in ("specfsm.action_failed", "specfsm.fault")]
    c = F.counters(eng.test_dir, wait_s=5)
    assert not c["failed"] and c["action_failures"] == 0, c


def test_outputs_after_profile_equal_nospec(eng: Any, reference: Any) -> None:
    """After the profile the engine serves under the profiled goodput policy: greedy outputs
    are token-identical to no speculation, and SGLang's idle memory check keeps passing."""
    out = E.generate_greedy(eng, PROMPTS, 20)
    assert out == reference(PROMPTS, 20)
    c = F.counters(eng.test_dir, wait_s=5)
    assert c["idle_checks"] > 0 and not c["failed"], c
