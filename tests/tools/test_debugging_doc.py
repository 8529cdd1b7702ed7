"""docs/debugging.md's H200 section: every `specfsm logs` command there, re-run on the committed
logs, prints exactly the text the document shows (a changed tool or table fails here)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import tarfile
from pathlib import Path

import pytest

from specfsm.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "debugging.md"
LOGS = ROOT / "benchmarks" / "gpu" / "results" / "2026-11-30_specfsm" / "specfsm_logs.tgz"


def _h200_commands() -> list[tuple[str, str]]:
    """(command, expected output) of each console block of the H200 section."""
    text = DOC.read_text()
    section = text.split("## A log from the H200 acceptance suite", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        lines = block.splitlines(keepends=True)
        cmds = [i for i, ln in enumerate(lines) if ln.startswith("$ ") and "specfsm logs" in ln]
        for i in cmds:
            end = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("$ ")), None)
            cmd = lines[i][2:].strip().split("&& ")[-1]
            out.append((cmd, "".join(lines[i + 1 : end])))
    return out


COMMANDS = _h200_commands()


def test_section_has_its_commands() -> None:
    assert [c.split()[2] for c, _ in COMMANDS] == ["summary", "replay"]


@pytest.mark.parametrize(("cmd", "expected"), COMMANDS, ids=[c[:40] for c, _ in COMMANDS])
def test_doc_output_matches_command(
    cmd: str, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tarfile.open(LOGS) as tar:
        names = [m for m in tar.getmembers() if m.name.endswith(".jsonl")]
        tar.extractall(tmp_path, members=names, filter="data")
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(shlex.split(cmd)[1:])
    assert rc == 0
    assert buf.getvalue() == expected, f"docs/debugging.md shows another output for: {cmd}"


def test_prose_figures_of_the_chain_replay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chain log's "always" / "never" figures quoted in the prose are the tool's."""
    with tarfile.open(LOGS) as tar:
        tar.extract("./transitions_chain_fsm.jsonl", tmp_path, filter="data")
    monkeypatch.chdir(tmp_path)
    buf = io.StringIO()
    cmd = "logs replay transitions_chain_fsm.jsonl --policy threshold:high=32,low=8 --max-rows 2"
    with contextlib.redirect_stdout(buf):
        assert main(cmd.split()) == 0
    got = dict(
        re.findall(r"^  (always|never) speculate .*\((\d\.\d+)x recorded\)", buf.getvalue(), re.M)
    )
    prose = " ".join(DOC.read_text().split())
    assert f'"always speculate" at {got["always"]}x the recorded run' in prose
    assert f'and "never" at {got["never"]}x' in prose
