"""Shape changes inside SPECULATING (RESHAPE) in the real SGLang engine on CPU: chain <-> chain,
tree <-> tree of the launch top-k and tree <-> chain on a tree server, to PLAIN and back,
overlap on and off; greedy outputs token-identical to no speculation, no KV slot leaked,
contracts checked on every forward."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

from specfsm.model.acceptance import DraftShape, parse_shape

pytestmark = pytest.mark.engine

CYCLE = "specfsm_testbed.shape_policies:ShapeCycle"
# Servers launch with their widest shape (server_checks.check_engine_shapes: SGLang sizes each
# request's req_to_token headroom for the launch shape) and list the narrower ones.
CHAIN5 = {"speculative_num_steps": 5, "speculative_num_draft_tokens": 6}
TREE348 = {"speculative_num_steps": 3, "speculative_num_draft_tokens": 8}
CONFIGS: dict[str, dict[str, Any]] = {
    "chain-overlap": {
        "engine": {"tree": False, "overlap": True, **CHAIN5},
        "shapes": ["chain1", "chain2", "chain3"],
        "launch": "chain5",
    },
    "chain-sync": {
        "engine": {"tree": False, "overlap": False, **CHAIN5},
        "shapes": ["chain1", "chain3"],
        "launch": "chain5",
        # no CUDA graphs on the CPU: the cap is accepted and captures nothing
        "config": {"shape_graph_max_bs": 4},
    },
    "tree-overlap": {
        "engine": {"tree": True, "overlap": True, **TREE348},
        "shapes": ["4,1,4", "4,2,8"],
        "launch": "4,3,8",
    },
    "tree-sync": {
        "engine": {"tree": True, "overlap": False, **TREE348},
        "shapes": ["4,1,4", "4,2,8"],
        "launch": "4,3,8",
    },
    # tree <-> chain on one tree server (top-k 4): chain1 -> chain3 -> PLAIN -> 4,2,8 -> chain3
    # -> 4,3,8 -> chain1 ...; the relay stays 4 wide, a chain drafts from its first column
    "tree-chain-overlap": {
        "engine": {"tree": True, "overlap": True, **TREE348},
        "shapes": ["chain1", "4,2,8", "chain3"],
        "launch": "4,3,8",
    },
    "tree-chain-sync": {
        "engine": {"tree": True, "overlap": False, **TREE348},
        "shapes": ["chain1", "4,2,8", "chain3"],
        "launch": "4,3,8",
    },
    # a narrower tree (top-k 2) and chain <-> chain on a tree server, warm PLAIN (steps=0 with
    # its 1-token draft extend instead of zero-tax's catch-up)
    "tree-narrow-warm": {
        "engine": {"tree": True, "overlap": True},
        "shapes": ["chain2", "2,2,4", "chain1"],
        "launch": "4,2,8",
        "config": {"plain": "warm"},
    },
}
PROMPTS = E.default_prompts(6, seed=23)
#: The transitions (iteration, src, dst, trigger, shape_to) of each shape-cycle run, recorded
#: before the decision layer was restructured; SPECFSM_GOLDEN_WRITE=<path> writes them anew.
GOLDEN = Path(__file__).resolve().parent / "golden" / "shape_transitions.jsonl"


def _golden(case: str, steps: list[dict[str, Any]]) -> None:
    """Compare the run's transitions with the recorded ones (or record them)."""
    rows = [[x["iteration"], x["src"], x["dst"], x["trigger"], x.get("shape_to")] for x in steps]
    out = os.environ.get("SPECFSM_GOLDEN_WRITE")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"case": case, "transitions": rows}) + "\n")
        return
    if GOLDEN.exists():
        want = {
            (d := json.loads(x))["case"]: d["transitions"]
            for x in GOLDEN.read_text().splitlines()
            if x.strip()
        }
        if case in want:
            assert rows == want[case], case


@pytest.fixture(scope="module", params=list(CONFIGS))
def eng(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One specfsm engine per configuration, with the configuration's extra shapes built."""
    c = CONFIGS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    e = F.make_fsm_engine(
        d, config={"shapes": c["shapes"], **c.get("config", {})}, spec="EAGLE3", **c["engine"]
    )
    e.test_dir = d
    e.cfg = c
    e.case = request.param
    yield e
    e.shutdown()


def _cycle(c: dict[str, Any], every: int, plain: bool = True) -> dict[str, Any]:
    targets = [c["shapes"][0], c["shapes"][-1]]
    if plain:
        targets.append("PLAIN")
    targets += [*c["shapes"][1:], c["launch"]]
    return {"name": CYCLE, "targets": targets, "every": every}


@pytest.mark.parametrize("every", [1, 3])
def test_shape_cycle_equals_nospec(eng: Any, reference: Any, every: int) -> None:
    """The shape changes every few forwards (through PLAIN too): outputs stay token-identical,
    the machine really reshaped, no fault and no contract violation."""
    before = len(F.transitions(eng.test_dir))
    F.set_policy(eng.test_dir, _cycle(eng.cfg, every))
    out = E.generate_greedy(eng, PROMPTS, 24)
    assert out == reference(PROMPTS, 24)
    c = F.counters(eng.test_dir, wait_s=5)
    assert not c["failed"] and c["action_failures"] == 0, c
    log = F.transitions(eng.test_dir)
    steps = [x for x in log if x.get("event") == "specfsm.transition"]
    _golden(
        f"{eng.case}/every{every}",
        [x for x in log[before:] if x.get("event") == "specfsm.transition"],
    )
    kinds = {(x["src"], x["dst"]) for x in steps}
    assert ("SPECULATING", "SPECULATING") in kinds, kinds
    assert ("PLAIN", "RESYNCING") in kinds and ("RESYNCING", "SPECULATING") in kinds, kinds
    if every > 1:  # every 1: the drain and the catch-up take iterations, some targets are skipped
        reached = {x.get("shape_to") for x in steps if x.get("trigger") == "RESHAPE"}
        want = {DraftShape.label(parse_shape(s)) for s in eng.cfg["shapes"]}
        assert want <= reached, (want, reached)
    assert not [x for x in log if x.get("event") in ("specfsm.action_failed", "specfsm.fault")]


def test_arrivals_aborts_while_reshaping_no_leak(eng: Any, reference: Any) -> None:
    """Requests arrive, finish and are aborted while the shape changes; SGLang's idle
    pool-invariant check runs afterwards (it raises on a leaked KV slot) and serving goes on."""
    F.set_policy(eng.test_dir, _cycle(eng.cfg, 2))
    trace = F.random_trace(random.Random(7), 12, p_abort=0.3)
    got = F.run_trace(eng, trace)
    ref = reference([r["prompt"] for r in trace], [r["max_new"] for r in trace])
    F.check_trace_outputs(trace, got, ref)
    n0 = F.counters(eng.test_dir, wait_s=5)["idle_checks"]
    time.sleep(1.5)
    assert eng.generate(input_ids=PROMPTS[0], sampling_params=E.sampling_params(4))["output_ids"]
    deadline = time.time() + 20
    while time.time() < deadline and F.counters(eng.test_dir)["idle_checks"] <= n0 + 1:
        time.sleep(0.5)
    c = F.counters(eng.test_dir)
    assert c["idle_checks"] > n0 and not c["failed"]


_ACCEPT_SCRIPT = """
import json, sys
from specfsm_testbed import engine as E, fsm as F

def main(test_dir, tree, shapes, target):
    e = F.make_fsm_engine(
        test_dir, config={"shapes": shapes}, spec="EAGLE", agree="mid", tree=tree
    )
    try:
        F.set_policy(test_dir, {"name": CYCLE, "targets": [target], "every": 10**6})
        prompts = E.default_prompts(6, seed=5)
        E.generate(e, prompts, 4)  # the RESHAPE to `target` happens here
        out = E.generate(e, prompts, 40)
        failed = F.counters(test_dir, wait_s=5)["failed"]
    finally:
        e.shutdown()
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    verifies = sum(o["meta_info"]["spec_verify_ct"] for o in out)
    print("@@" + json.dumps({"accept": tokens / verifies, "failed": failed}), flush=True)

if __name__ == "__main__":
    main(*json.loads(sys.argv[1]))
"""


def _accept_length(test_dir: Any, tree: bool, shapes: list[str], target: str) -> float:
    """Mean accept length (tokens per K-wide verify) of a server pinned to `target`, on the
    agreeing bigram target with its ~0.6-accepting EAGLE draft (models.py). In a child process:
    SGLang's Engine.shutdown() kills every child of its caller, which here would include the
    module's live `eng` engine."""
    script = test_dir / "accept.py"
    script.write_text(f"CYCLE = {CYCLE!r}\n" + _ACCEPT_SCRIPT)
    args = json.dumps([str(test_dir), tree, shapes, target])
    run = subprocess.run(
        [sys.executable, str(script), args], capture_output=True, text=True, timeout=600
    )
    lines = [x for x in run.stdout.splitlines() if x.startswith("@@")]
    assert run.returncode == 0 and lines, run.stderr[-3000:]
    got = json.loads(lines[-1][2:])
    assert not got["failed"], got
    return float(got["accept"])


def test_chain_on_a_tree_server_drafts_as_a_chain_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A chain drafting from the tree server's 4-wide relay (its first column) proposes what a
    chain server proposes: the same accept length, not only the same (verified) output."""
    on_tree = _accept_length(tmp_path_factory.mktemp("on-tree"), True, ["chain3"], "chain3")
    on_chain = _accept_length(tmp_path_factory.mktemp("on-chain"), False, [], "chain3")
    assert on_tree == pytest.approx(on_chain), (on_tree, on_chain)
    assert on_chain > 1.5  # the draft is accepted at all: the comparison means something
