"""`specfsm tune --profile` reads the engine's start-up profile (the adapter's CSV: whole steps
per shape and PLAIN): profiled shapes are priced as measured and no longer flagged as
interpolated; a shape the profile lacks still is."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfsm.cli.tune import main
from specfsm.model.acceptance import DraftShape
from specfsm.model.costs import spec_step_model

FIT = "h200_sglang0517_llama8b"


def _profile(tmp_path: Path) -> Path:
    """A start-up profile as the engine writes it: chain1, chain3 (launch) and PLAIN, bs 1-64."""
    lines = ["# specfsm start-up profile (test)", "model,bs,q,ctx,ms_per_step"]
    for bs in (1, 8, 32, 64):
        lines.append(f"plain_step,{bs},1,1024,{6.0 + bs * 0.03:.3f}")
        for s, base in ((DraftShape.chain(1), 11.0), (DraftShape.chain(3), 12.0)):
            lines.append(f"{spec_step_model(s)},{bs},{s.draft_tokens},1024,{base + bs * 0.2:.3f}")
    p = tmp_path / "profile-0.csv"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_tune_reads_the_engine_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shapes with profile rows are not interpolated; chain5 (not profiled) is; among profiled
    choices the shape table follows the profile's prices (PLAIN at 6.96 ms vs chain3 at 18.4 ms
    wins at bs 32)."""
    prof = _profile(tmp_path)
    args = [
        "--table",
        FIT,
        "--shape",
        "chain3",
        "--alpha",
        "0.7",
        "--shapes",
        "chain1,chain3,chain5",
        "--profile",
        str(prof),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = out[out.index("shape table") :]
    assert "chain5 INTERPOLATED" in table
    assert "note: chain5 has no whole-step rows in the profile" in table
    assert "chain1 INTERPOLATED" not in table and "chain3 INTERPOLATED" not in table
    # among profiled choices only (an unprofiled shape is priced from the table's forwards)
    assert main([*args[:6], "--shapes", "chain1,chain3", "--profile", str(prof)]) == 0
    table = capsys.readouterr().out.split("shape table")[1]
    row32 = next(ln for ln in table.splitlines() if ln.split()[:1] == ["32"])
    assert "PLAIN" in row32, row32
    assert main([*args[:-2]]) == 0  # without the profile chain1 is interpolated
    assert "chain1 INTERPOLATED" in capsys.readouterr().out
