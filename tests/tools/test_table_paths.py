"""Tables given by a path inside a folder: the benchmarks' quick modes and `specfsm sim` finish,
print their summary lines, name their files by the table's stem, keep every run in their
journal, and report a plot that cannot be written in one line, after the results."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specfsm.cli import main
from specfsm.model.costs import load_table, packaged_tables, table_stem
from specfsm.sim.sweep import unique_stems

ROOT = Path(__file__).resolve().parents[2]
COSTS = ROOT / "specfsm/data/costs"
SUMMARY = (
    "a_min_ratio_vs_best_static_grid",
    "a_min_ratio_vs_best_peer",
    "b_min_ratio_vs_phase_oracle",
    "b_p99_tpot_ratio_vs_phase_oracle",
    "b_max_switches_per_100_iterations",
)


@pytest.mark.parametrize(
    ("arg", "stem"),
    [
        ("some/folder/my_table.csv", "my_table"),
        ("/abs/dir/t.csv", "t"),
        ("C:\\runs\\t.csv", "t"),
        ("h200_sglang0517_llama8b", "h200_sglang0517_llama8b"),
        ("h200_sglang0517_llama8b.csv", "h200_sglang0517_llama8b"),
        ("a/x.csv+b/y.csv", "x+y"),
        ("dir/my table (2).csv", "my_table__2_"),
        ("..", "table"),
    ],
)
def test_table_stem(arg: str, stem: str) -> None:
    assert table_stem(arg) == stem


def test_packaged_names_are_their_own_stems() -> None:
    """A packaged table's file names do not change; two tables of one stem get numbered."""
    for name in packaged_tables():
        assert table_stem(name) == name
    merged = "h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096"
    assert table_stem(merged) == merged
    assert unique_stems(["a/t.csv", "b/t.csv", "t"]) == {
        "a/t.csv": "t",
        "b/t.csv": "t-2",
        "t": "t-3",
    }


def _table_in_folder(tmp_path: Path, name: str = "h200_sglang0517_llama8b_triton") -> str:
    """A copy of a packaged table at some/folder/my_table.csv under `tmp_path` (relative)."""
    (tmp_path / "some/folder").mkdir(parents=True)
    shutil.copy(COSTS / f"{name}.csv", tmp_path / "some/folder/my_table.csv")
    return "some/folder/my_table.csv"


def _bench(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _journal(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_policy_sweep_scores_a_table_in_a_folder(tmp_path: Path) -> None:
    """The report's command in quick mode: it finishes, prints the summary lines, names its
    plots my_table_*, a plot that cannot be written is one line after them; a resumed run of a
    journal cut short mid-line prints the same lines."""
    table = _table_in_folder(tmp_path)
    out = tmp_path / "out"
    (out / "throughput_my_table_tree_a0.8.png").mkdir(parents=True)  # that plot cannot be saved
    args = ["--fit-table", "h200_sglang0517_llama8b", "--score-table", table, "--quick"]
    proc = _bench(tmp_path, "policy_sweep.py", *args, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for name in SUMMARY:
        assert re.search(rf"^{name}: \d+\.\d+ \(goal [<>]= [\d.]+\)$", text, re.M), name
    failed = [line for line in text.splitlines() if line.startswith("plot ")]
    assert len(failed) == 1 and "throughput_my_table_tree_a0.8.png not written" in failed[0]
    assert text.index(failed[0]) > text.index("b_max_switches_per_100_iterations:")
    assert (out / "throughput_my_table_chain3_a0.8.png").is_file()
    assert (out / "timeline_bursts_chain3_a0.8.png").is_file()
    assert (out / "policy_sweep.csv").is_file()
    runs = _journal(out / "policy_sweep_runs.jsonl")
    wall = re.search(r"^wall \d+ s, (\d+) runs \+ (\d+) close-cell runs", text, re.M)
    assert wall and len(runs) == 1 + int(wall.group(1)) + int(wall.group(2))
    assert "meta" in runs[0] and all(r["task"][0] == table for r in runs[1:])

    lines = (out / "policy_sweep_runs.jsonl").read_text().splitlines()
    keep = len(lines) // 2
    (out / "policy_sweep_runs.jsonl").write_text("\n".join(lines[:keep]) + "\n" + lines[keep][:50])
    again = _bench(tmp_path, "policy_sweep.py", *args, "--out", str(out), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {keep - 1} finished runs read from" in again.stderr

    def body(s: str) -> list[str]:
        return [line for line in s.splitlines() if not line.startswith("wall ")]

    assert body(again.stdout) == body(text)


def test_shape_check_quick_with_tables_in_a_folder(tmp_path: Path) -> None:
    """shape_check --quick fitted and scored on tables given by paths: its minimum lines, and
    every run in its journal."""
    table = _table_in_folder(tmp_path)
    out = tmp_path / "deep/out"
    args = ["--quick", "--fit-table", table, "--score-tables", table, "--out", str(out)]
    proc = _bench(tmp_path, "shape_check.py", *args)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: a cell below 0.99
    assert re.search(rf"^min ratio {table} alpha 0.8: \d\.\d+ \(conc \d+\)", proc.stdout, re.M)
    assert len(_journal(out / "shape_check_runs.jsonl")) == 1 + 2 * 10


def test_context_sweep_quick_plot_failure_after_the_summary(tmp_path: Path) -> None:
    """context_sweep takes no table argument (its two tables are fixed); its quick mode into a
    nested --out prints the summary lines, then one line for a plot it cannot write."""
    out = tmp_path / "a/b"
    (out / "context_sweep.png").mkdir(parents=True)
    proc = _bench(tmp_path, "context_sweep.py", "--quick", "--jobs", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    last = text.index("min_ratio_vs_best_static[ctx-aware]:")
    assert re.search(r"^plot \S+context_sweep.png not written: ", text[last:], re.M)
    assert (out / "context_sweep.csv").is_file()
    assert len(_journal(out / "context_sweep_runs.jsonl")) == 1 + 480


def test_sim_with_tables_in_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specfsm sim` fitted and scored on tables given by paths: sim.csv and the timeline plot
    are written; a plot it cannot write is one line."""
    table = _table_in_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    (out / "throughput_vs_concurrency.png").mkdir(parents=True)
    argv = ["sim", "--fit-table", table, "--table", table, "--levels", "1", "--trace", "bursts",
            "--duration", "4", "--iterations", "20", "--warmup", "0", "--policies",
            "no-spec,specfsm-zero-tax", "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("plot ")]) == 1
    assert "throughput_vs_concurrency.png not written" in err
    assert (out / "sim.csv").is_file() and (out / "timeline_bursts2_128.png").is_file()
    assert load_table(table).source == table
