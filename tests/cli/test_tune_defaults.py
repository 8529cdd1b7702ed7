"""`specfsm tune`'s defaults and ranges: the in-engine table, contexts outside the table refused,
batch sizes above it flagged, prices resting on interpolation alone said so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specfsm.cli.main import main
from specfsm.model.tables import ENGINE_TABLE


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["tune", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_default_table_is_the_in_engine_one(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["--json"], capsys)
    data = json.loads(out)
    assert rc == 0 and data["table"] == ENGINE_TABLE
    assert data["config"]["policy"]["table"] == ENGINE_TABLE
    assert data["config"]["policy"]["shape"] == "chain3"


@pytest.mark.parametrize("ctx", ["100000", "512", "4096"])
def test_ctx_outside_the_table_refused(ctx: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = _run(["--ctx", ctx], capsys)
    assert rc == 2 and out == ""
    assert err.strip() == (
        f"specfsm tune: --ctx {ctx}: outside {ENGINE_TABLE}'s measured contexts (1024); give a "
        f"table that measures it (a+b merges tables, e.g. {ENGINE_TABLE}+{ENGINE_TABLE}_ctx4096)"
        " or --profile"
    )


def test_ctx_inside_a_merged_table(capsys: pytest.CaptureFixture[str]) -> None:
    table = f"{ENGINE_TABLE}+{ENGINE_TABLE}_ctx4096"
    rc, out, _ = _run(["--table", table, "--ctx", "2048", "--json"], capsys)
    assert rc == 0 and json.loads(out)["ctx"] == 2048


def test_bs_above_the_table_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    """The ctx 4096 table measures bs up to 128: the bs 256 row says it is extrapolated."""
    rc, out, _ = _run(["--table", f"{ENGINE_TABLE}_ctx4096"], capsys)
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln[:5].strip().isdigit()}
    assert rc == 0 and rows["256"].endswith("EXTRAPOLATED (above the table's bs)")
    assert "EXTRAPOLATED" not in rows["128"]


def test_shapes_on_the_prior_alone_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["--shapes", "chain1,chain2,chain3"], capsys)
    assert rc == 0
    assert "note: the * prices rest on the table's interpolation alone" in out
    assert "--profile" in out.splitlines()[-1] or "as --profile" in out


def test_log_says_what_it_prices_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "obs.jsonl"
    f.write_text(json.dumps({"event": "specfsm.observation", "accept_lens": [3, 2, 3]}) + "\n")
    rc, _, err = _run(["--log", str(f)], capsys)
    assert rc == 0 and f"the steps are priced on {ENGINE_TABLE}" in err
