"""Hand-made specfsm log lines and the CLI runner, shared by the log-tool tests."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specfsm.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def line(event: str, rank: int, iteration: int, ts: float, **fields: Any) -> str:
    return json.dumps({"event": event, "rank": rank, "iteration": iteration, "ts": ts, **fields})


def trans(rank: int, it: int, src: str, dst: str, trigger: str, reason: str = "r") -> str:
    return line(
        "specfsm.transition",
        rank,
        it,
        100.0 + it,
        src=src,
        dst=dst,
        trigger=trigger,
        reason=reason,
        bs=4,
        accept_lens=[2, 3],
    )


def obs(rank: int, it: int, mode: str, bs: int = 4) -> str:
    return line("specfsm.observation", rank, it, 100.0 + it, mode=mode, bs=bs, accept_lens=[2])


def flap_lines(rank: int, extra: bool = False) -> list[str]:
    out = [
        line("specfsm.config", rank, 0, 100.0, initial_mode="SPECULATING"),
        trans(rank, 3, "SPECULATING", "DRAINING", "LOAD_HIGH", "decode_bs=40 > high=32"),
        trans(rank, 3, "DRAINING", "PLAIN", "DRAINED"),
        obs(rank, 5, "PLAIN"),
    ]
    if extra:  # this rank goes back to speculating at iteration 6, the other does not
        out.append(trans(rank, 6, "PLAIN", "RESYNCING", "LOAD_LOW", "decode_bs=2 <= low=8"))
    out.append(obs(rank, 8, "RESYNCING" if extra else "PLAIN"))
    return out
