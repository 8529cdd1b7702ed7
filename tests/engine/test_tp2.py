"""tp_size=2 on the CPU engine: both scheduler ranks take identical decisions, outputs stay
identical to no speculation."""

from __future__ import annotations

from pathlib import Path

import pytest
from specfsm_testbed import engine as E
from specfsm_testbed import fsm as F

pytestmark = pytest.mark.engine


def _decisions(test_dir: Path, rank: int) -> list[tuple[int, str, str, str]]:
    """(iteration, src, dst, trigger) of every transition the rank logged."""
    return [
        (x["iteration"], x["src"], x["dst"], x["trigger"])
        for x in F.transitions(test_dir, rank)
        if x.get("event") == "specfsm.transition"
    ]


def test_tp2_identical_decisions(
    tmp_path: Path, reference: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two TP ranks log the same transitions at the same iterations, those decided right
    before a prefill included; outputs equal no-spec."""
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|1")
    prompts = E.default_prompts(2, seed=3)
    eng = F.make_fsm_engine(
        tmp_path,
        policy={"name": "random", "seed": 4, "p": 0.5, "prefills": True},
        spec="EAGLE3",
        tp_size=2,
    )
    try:
        out = E.generate_greedy(eng, prompts, 12)
    finally:
        eng.shutdown()
    assert out == reference(prompts, 12)  # type: ignore[operator]

    assert _decisions(tmp_path, 0) and _decisions(tmp_path, 0) == _decisions(tmp_path, 1)
    at_prefill = [
        [x["iteration"] for x in F.transitions(tmp_path, r) if x.get("prefill_tokens")]
        for r in (0, 1)
    ]
    assert at_prefill[0] == at_prefill[1]


def test_tp2_startup_profile_agrees(
    tmp_path: Path, reference: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start-up profile on two TP ranks: the same transitions at the same iterations on
    both, the same rows (rank 0's, broadcast) written by each, outputs equal no-spec."""
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0|1")
    prompts = E.default_prompts(2, seed=5)
    policy = {
        "name": "goodput",
        "table": "h200_sglang0517_llama8b",
        "shape": "chain3",
        "accept_len": 2.0,
        "shapes": ["chain1", "chain3"],
    }
    cfg = {
        "shapes": ["chain1"],
        "profile": {
            "bs": [1, 2],
            "forwards": 2,
            "prompt_tokens": 16,
            "save": str(tmp_path / "profile-{rank}.csv"),
        },
    }
    eng = F.make_fsm_engine(tmp_path, policy=policy, config=cfg, spec="EAGLE3", tp_size=2)
    try:
        out = E.generate_greedy(eng, prompts, 12)
    finally:
        eng.shutdown()
    assert out == reference(prompts, 12)  # type: ignore[operator]

    assert _decisions(tmp_path, 0) and _decisions(tmp_path, 0) == _decisions(tmp_path, 1)
    rows = [
        [
            ln
            for ln in (tmp_path / f"profile-{r}.csv").read_text().splitlines()
            if not ln.startswith("#")
        ]
        for r in (0, 1)
    ]
    assert len(rows[0]) > 1 and rows[0] == rows[1]
