"""Every mistyped input is refused before any work: one line naming it, exit != 0, no traceback.

The table runs through the real CLI entry (`specfsm.cli.main`, stderr captured); a few cases
also run as a separate process through the installed `specfsm` script.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from specfsm.cli import main

HEADER = "model,bs,q,ctx,ms_per_step"
GOOD_TARGET = "llama8b,1,1,1024,5.0\nllama8b,8,1,1024,6.0\nllama8b,1,4,1024,6.5\n"

#: Bad cost CSVs: name -> file content (written under tmp_path as <name>.csv).
CSVS = {
    "nonnumeric": f"# measured somewhere\n{HEADER}\n{GOOD_TARGET}llama8b,16,1,1024,fast\n",
    "shortrow": f"{HEADER}\nllama8b,1,1,1024\n",
    "negative": f"{HEADER}\n{GOOD_TARGET}eagle3_draft8b,1,1,1024,-137.6\n",
    "zero": f"{HEADER}\nllama8b,1,1,1024,0\n",
    "badbs": f"{HEADER}\nllama8b,one,1,1024,2.0\n",
    "nodraft": f"{HEADER}\n{GOOD_TARGET}",
    "noheader": "llama8b,1,1,1024,5.0\n",
    "duplicate": f"{HEADER}\n{GOOD_TARGET}llama8b,1,1,1024,5.5\n",
}

# (argv, substrings the one error line must contain). "CSV:<name>" stands for that file's path.
CASES: list[tuple[list[str], list[str]]] = [
    (["nosuch"], ["'nosuch'"]),
    (["diagram", "--format", "svg"], ["--format", "'svg'"]),
    (["diagram", "--update-doc", "/nonexistent/doc.md"], ["--update-doc", "/nonexistent/doc.md"]),
    (["walkthrough", "--fast"], ["--fast"]),
    (["tune", "--alpha", "1.5"], ["--alpha", "'1.5'", "[0, 1]"]),
    (["tune", "--alpha", "nan"], ["--alpha", "'nan'"]),
    (["tune", "--accept-len", "0.5"], ["--accept-len", "'0.5'", ">= 1"]),
    (["tune", "--accept-len", "9"], ["--accept-len", "at most"]),
    (["tune", "--table", "nosuch"], ["--table", "'nosuch'", "no cost table"]),
    (["tune", "--shape", "pyramid"], ["--shape", "'pyramid'"]),
    (["tune", "--shape", "1,3,9"], ["--shape", "'1,3,9'"]),
    (["tune", "--ctx", "-5"], ["--ctx", "'-5'"]),
    (["tune", "--log", "/nonexistent/log.jsonl"], ["--log /nonexistent/log.jsonl"]),
    (["tune", "--plain", "cold"], ["--plain", "'cold'"]),
    (["sim", "--table", "nosuch"], ["--table", "'nosuch'", "no cost table"]),
    (["sim", "--fit-table", "nosuch"], ["--fit-table", "'nosuch'"]),
    (["sim", "--policies", "foo"], ["--policies", "'foo'", "specfsm-warm"]),
    (["sim", "--policies", "no-spec,bar"], ["--policies", "'bar'"]),
    (["sim", "--levels", "a"], ["--levels", "'a'"]),
    (["sim", "--levels", "1,0"], ["--levels", "'0'"]),
    (["sim", "--poisson", "x"], ["--poisson", "'x'"]),
    (["sim", "--alpha", "2"], ["--alpha", "'2'"]),
    (["sim", "--duration", "0"], ["--duration", "'0'"]),
    (["sim", "--iterations", "ten"], ["--iterations", "'ten'"]),
    (["sim", "--trace", "spikes"], ["--trace", "'spikes'"]),
    (["sim", "--levels", ""], ["nothing to run", "--levels"]),
    (["demo", "--ramp", "a,b"], ["--ramp", "'a'"]),
    (["demo", "--ramp", ","], ["--ramp"]),
    (["demo", "--max-new-tokens", "0"], ["--max-new-tokens", "'0'"]),
    (["demo", "--policy", "thresh"], ["--policy 'thresh'", "unknown policy"]),
    (["demo", "--policy", "threshold:high=eight"], ["--policy 'threshold:high=eight'"]),
    (["demo", "--policy", "threshold:high=8,low=9"], ["--policy", "low"]),
    (["demo", "--policy", "threshold:high"], ["--policy 'threshold:high'", "key=value"]),
    (["demo", "--spec", "MEDUSA"], ["--spec", "'MEDUSA'"]),
    (["tune", "--table", "CSV:nonnumeric"], ["CSV:nonnumeric", "line 6", "ms_per_step", "'fast'"]),
    (["tune", "--table", "CSV:shortrow"], ["CSV:shortrow", "line 2", "4 fields, need 5"]),
    (["tune", "--table", "CSV:negative"], ["CSV:negative", "line 5", "'-137.6'", "> 0"]),
    (["sim", "--table", "CSV:zero"], ["CSV:zero", "line 2", "'0'"]),
    (["tune", "--table", "CSV:badbs"], ["CSV:badbs", "line 2", "bs", "'one'"]),
    (["tune", "--table", "CSV:nodraft"], ["CSV:nodraft", "eagle3_draft8b", "llama8b", "needs"]),
    (["sim", "--fit-table", "CSV:nodraft"], ["--fit-table", "CSV:nodraft", "eagle3_draft8b"]),
    (["tune", "--table", "CSV:noheader"], ["CSV:noheader", "line 1", "header", "ms_per_step"]),
    (["tune", "--table", "CSV:duplicate"], ["CSV:duplicate", "line 5", "line 2"]),
]


@pytest.fixture(autouse=True)
def _no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """`specfsm demo` must refuse its input before the engine could start: a stub engine
    module whose make_engine fails the test if it is ever reached."""
    stub = types.ModuleType("specfsm_testbed.engine")

    def make_engine(**_: object) -> None:
        raise AssertionError("the engine started before the input was validated")

    stub.make_engine = make_engine  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "specfsm_testbed.engine", stub)


def _resolve(argv: list[str], expect: list[str], tmp_path: Path) -> tuple[list[str], list[str]]:
    paths = {}
    for name, text in CSVS.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(text)
        paths[f"CSV:{name}"] = str(path)

    def sub(x: str) -> str:
        for k, v in paths.items():
            x = x.replace(k, v)
        return x

    return [sub(a) for a in argv], [sub(e) for e in expect]


def _one_line_error(rc: int, err: str, expect: list[str]) -> None:
    assert rc != 0
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for piece in expect:
        assert piece in lines[0], (piece, lines[0])


@pytest.mark.parametrize(("argv", "expect"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_refused_in_one_line(
    argv: list[str],
    expect: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI refuses the input: exit != 0, one stderr line naming it, no traceback."""
    monkeypatch.chdir(tmp_path)  # `sim` would write out/ here if it ever got that far
    argv, expect = _resolve(argv, expect, tmp_path)
    rc = main(argv)
    captured = capsys.readouterr()
    _one_line_error(rc, captured.err, expect)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["sim", "--table", "nosuch"], ["--table", "'nosuch'"]),
        (["tune", "--alpha", "1.5"], ["--alpha", "'1.5'"]),
        (["demo", "--policy", "threshold:high=eight"], ["--policy 'threshold:high=eight'"]),
    ],
)
def test_bad_input_refused_by_the_installed_script(
    argv: list[str], expect: list[str], tmp_path: Path
) -> None:
    """The same through a separate `specfsm` process (the console script, else -m)."""
    script = Path(sys.executable).with_name("specfsm")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "specfsm.cli"]
    proc = subprocess.run(
        [*cmd, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )
    _one_line_error(proc.returncode, proc.stderr, expect)
    assert proc.stdout == ""


def test_missing_sim_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without numpy and matplotlib `specfsm sim` says which extra to install, in one line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc = main(["sim", "--levels", "1", "--iterations", "5", "--warmup", "0"])
    _one_line_error(rc, capsys.readouterr().err, ["numpy", 'pip install "specfsm[sim]"'])
    assert not (tmp_path / "out").exists()


def test_missing_graphviz_refuses_dot(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the graphviz package `diagram --format dot` refuses in one line, no Mermaid."""
    monkeypatch.setitem(sys.modules, "graphviz", None)
    rc = main(["diagram", "--format", "dot"])
    captured = capsys.readouterr()
    _one_line_error(
        rc, captured.err, ["--format dot", "graphviz", 'pip install "specfsm[diagram]"']
    )
    assert captured.out == ""


def test_every_trace_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`sim --trace` accepts each of its choices (bursts and all crashed with KeyError)."""
    for trace in ("ramp", "bursts", "sine", "all"):
        out = tmp_path / trace
        argv = ["sim", "--levels", "", "--trace", trace, "--duration", "4", "--policies",
                "no-spec", "--no-progress", "--out", str(out)]  # fmt: skip
        assert main(argv) == 0, capsys.readouterr().err
        loads = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("== load")]
        assert len(loads) == (3 if trace == "all" else 1)
        assert (out / "sim.csv").exists()
