"""`specfsm config check`: the launch hook's checks without SGLang, one line per problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm.cli.main import main

SERVER = [
    "--model-path",
    "m",
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-steps",
    "3",
    "--speculative-num-draft-tokens",
    "4",
]

#: (configuration text, server flags, the start of the one refusal line after "FILE: ")
BAD: list[tuple[str, list[str], str]] = [
    ("[1, 2]", [], "SPECFSM_CONFIG: expected a JSON object"),
    ("{not json", [], "SPECFSM_CONFIG: cannot read configuration"),
    ('{"polcy": {"name": "fixed"}}', [], "polcy: unknown configuration key"),
    ('{"initial_mode": "OFF"}', [], "initial_mode: expected"),
    ('{"policy": {"name": "threshold", "high": 4, "low": 8}}', [], "policy"),
    ('{"policy": "nosuch:x=1"}', [], "policy"),
    ('{"control_every": 0}', [], "control_every: expected an integer >= 1"),
    ('{"plain": "cold"}', [], "plain: expected"),
    ('{"profile": true}', [], "profile: the start-up profile prices the goodput policy"),
    (
        '{"policy": {"name": "goodput", "shape": "chain5", "accept_len": 2.5}}',
        SERVER,
        "policy.shape: the goodput policy is priced for chain5",
    ),
    ('{"shapes": ["4,2,16"]}', SERVER, "shapes: "),
    ('{"plain": "zero_tax"}', [*SERVER, "--enable-mixed-chunk"], "plain: enable_mixed_chunk"),
    ("{}", [*SERVER, "--speculative-adaptive"], "server_args: speculative_adaptive=True"),
]


def _check(
    tmp_path: Path, text: str, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    f = tmp_path / "c.json"
    f.write_text(text)
    rc = main(["config", "check", str(f), *(["--", *flags] if flags else [])])
    out = capsys.readouterr().out.splitlines()
    return rc, [line.removeprefix(f"{f}: ") for line in out]


@pytest.mark.parametrize(("text", "flags", "start"), BAD)
def test_bad_config_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, flags: list[str], start: str
) -> None:
    rc, lines = _check(tmp_path, text, flags, capsys)
    assert rc == 1 and len(lines) == 1, lines
    assert lines[0].startswith(start), lines


def test_each_bad_key_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = _check(tmp_path, '{"x": 1, "plain": "cold", "lag_tokens": 0}', [], capsys)
    assert rc == 1 and [ln.split(":")[0] for ln in lines] == ["x", "plain", "lag_tokens"]


def test_good_configs_and_nothing_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "new" / "log-{rank}.jsonl"
    cfg = {"policy": "threshold:high=32,low=8", "log": str(log)}
    assert _check(tmp_path, json.dumps(cfg), SERVER, capsys) == (0, ["ok"])
    assert not (tmp_path / "new").exists()


def test_tune_json_config_starts_as_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`specfsm tune --json`'s "config" passes the check on the shape it was priced for."""
    assert main(["tune", "--json", "--accept-len", "2.5"]) == 0
    cfg = json.loads(capsys.readouterr().out)["config"]
    assert _check(tmp_path, json.dumps(cfg), SERVER, capsys) == (0, ["ok"])


def test_no_sglang_imported() -> None:
    code = (
        "import sys; from specfsm.cli.main import main; "
        "main(['config', 'check', '/nonexistent.json']); "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'sglang'], 'sglang imported'"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "cannot read configuration /nonexistent.json" in r.stdout


DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_config_reference_lists_every_key() -> None:
    from specfsm_sglang.config import Config

    rows = {
        line.split("|")[1].strip().strip("`")
        for line in DOC.read_text().splitlines()
        if line.startswith("| `")
    }
    assert set(Config.keys()) <= rows, sorted(set(Config.keys()) - rows)


def test_config_reference_examples_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every JSON example of docs/config.md passes the check (on the server of its shape)."""
    blocks = DOC.read_text().split("```json\n")[1:]
    assert len(blocks) == 3
    for block in blocks:
        text = block.split("```")[0].replace("/var/log/specfsm", str(tmp_path))
        shape = json.loads(text)["policy"]
        steps = "7" if isinstance(shape, dict) and shape.get("shape") == "chain7" else "3"
        flags = [
            *SERVER[:-4],
            "--speculative-num-steps",
            steps,
            "--speculative-num-draft-tokens",
            str(int(steps) + 1),
        ]
        assert _check(tmp_path, text, flags, capsys) == (0, ["ok"]), text


def test_log_alone_does_not_turn_specfsm_on() -> None:
    from specfsm_sglang import config

    assert not config.requested({"SPECFSM_LOG": "/tmp/x.jsonl"})
    assert config.requested({"SPECFSM_POLICY": "fixed:speculate=true"})
