"""Filing a driver's results (benchmarks/gpu/file_results.py): what a wait call brought back
becomes a results folder's sub-folder (runs, summary, driver log, request records, the rest in
a tgz) and the server logs' kept lines, without touching a sub-folder already filed."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))

import file_results

LOG = (
    "[2026-12-06 08:22:21] server_args=ServerArgs(gc_warning_threshold_secs=0.1)\n"
    "[2026-12-06 08:25:00] Capture cuda graph begin. This can take up to several minutes.\n"
    "[2026-12-06 08:25:40] Decode batch, #running-req: 15, cuda graph: True\n"
    "[2026-12-06 08:28:23] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.6s\n"
    '[2026-12-06 08:28:25] INFO:     127.0.0.1:1 - "GET /freeze_gc HTTP/1.1" 200 OK\n'
    '[2026-12-06 08:28:26] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK\n'
)


def _fetched(tmp_path: Path) -> Path:
    """A folder as a wait call leaves it: the mirror's files and the driver's tgz."""
    got = tmp_path / "fetched"
    got.mkdir()
    (got / "runs.jsonl").write_text('{"started": "2026-12-06 08:22:20 UTC"}\n')
    (got / "serving_summary.txt").write_text("serve_lost_requests: 0\n")
    (got / "sv_drive.log").write_text("[serving +0s] nospec: starting\n")
    members = {
        "./runs.jsonl": b"{}\n",
        "./requests/nospec_day_rep0.jsonl.gz": b"gz",
        "./logs/server_nospec.log": LOG.encode(),
        "./iters/nospec/iter-1.jsonl": b"{}\n",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (got / "serving_results.tgz").write_bytes(buf.getvalue())
    return got


def test_a_fetched_driver_is_filed(tmp_path: Path) -> None:
    got, folder = _fetched(tmp_path), tmp_path / "results"
    said = file_results.file_results(got, folder, "machine17")
    sub = folder / "machine17"
    assert (sub / "runs.jsonl").read_text() == (got / "runs.jsonl").read_text()
    assert (sub / "serving_summary.txt").is_file()
    assert (sub / "serving_call.log").read_text() == "[serving +0s] nospec: starting\n"
    assert (sub / "requests" / "nospec_day_rep0.jsonl.gz").read_bytes() == b"gz"
    with tarfile.open(sub / "traces_logs_machine17.tgz") as tf:
        assert sorted(tf.getnames()) == ["iters/nospec/iter-1.jsonl", "logs/server_nospec.log"]
    kept = (folder / "logs" / "server_nospec.log").read_text().splitlines()
    assert [row.split("] ", 1)[1][:20] for row in kept] == [
        "server_args=ServerAr",
        "Capture cuda graph b",
        "LONG GARBAGE COLLECT",
        "INFO:     127.0.0.1:",
    ]
    assert any(s.endswith("server_nospec.log: 4 lines kept") for s in said)
    with pytest.raises(SystemExit, match="exists"):
        file_results.file_results(got, folder, "machine17")
    file_results.file_results(got, folder, "second", logs_beside=True)
    assert (folder / "second" / "server_nospec_lines.log").read_text() == "\n".join(kept) + "\n"


def test_a_tgz_that_came_back_in_parts_is_joined(tmp_path: Path) -> None:
    got = _fetched(tmp_path)
    whole = (got / "serving_results.tgz").read_bytes()
    (got / "serving_results.tgz").unlink()
    cut = len(whole) // 2  # as `split -b` cuts: anywhere
    (got / "serving_results.tgz.partaa").write_bytes(whole[:cut])
    (got / "serving_results.tgz.partab").write_bytes(whole[cut:])
    file_results.file_results(got, tmp_path / "results", "machine20")
    sub = tmp_path / "results" / "machine20"
    assert (sub / "requests" / "nospec_day_rep0.jsonl.gz").read_bytes() == b"gz"
    with tarfile.open(sub / "traces_logs_machine20.tgz") as tf:
        assert sorted(tf.getnames()) == ["iters/nospec/iter-1.jsonl", "logs/server_nospec.log"]


def test_a_folder_without_the_driver_s_results_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit, match=r"holds no runs\.jsonl or serving_results\.tgz"):
        file_results.file_results(tmp_path, tmp_path / "results", "m")
    with pytest.raises(SystemExit):
        file_results.main(["--fetched", str(tmp_path), "--folder", "x", "--name", "m", "--merge"])


def test_every_driver_of_a_folder_is_merged_with_its_repetitions_numbered_on(
    tmp_path: Path,
) -> None:
    def driver(name: str, started: str, reps: int) -> None:
        sub = tmp_path / name
        sub.mkdir()
        rows = [f'{{"started": "{started}"}}', '{"server": "eagle", "start_s": 75.0}']
        rows += [f'{{"server": "eagle", "trace": "light", "rep": {r}}}' for r in range(reps)]
        (sub / "runs.jsonl").write_text("\n".join(rows) + "\n")

    driver("machine19b", "2026-12-06 11:14:40 UTC", 3)
    driver("machine19", "2026-12-06 10:54:44 UTC", 2)
    driver("machine20", "2026-12-06 12:00:00 UTC", 1)
    (tmp_path / "logs").mkdir()
    (tmp_path / "runs.jsonl").write_text("{}\n")  # the merge written before: not a driver
    assert file_results.drivers(tmp_path) == [
        f"{tmp_path / 'machine19'}:0",
        f"{tmp_path / 'machine19b'}:2",
        f"{tmp_path / 'machine20'}:5",
    ]


def test_the_drivers_traces_and_profiler_reports_are_unpacked_for_the_summary_only(
    tmp_path: Path,
) -> None:
    got, folder = _fetched(tmp_path), tmp_path / "results"
    file_results.file_results(got, folder, "machine17")
    by_hand = folder / "machine16"  # a folder packed by hand names its members ./iters/...
    by_hand.mkdir()
    with tarfile.open(by_hand / "traces_logs_machine16.tgz", "w:gz") as tf:
        info = tarfile.TarInfo("./iters/eagle/iter-2.jsonl")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"[]\n"))
        for name, data in (
            ("./torch_profile/eagle.report.json", b"{}\n"),  # the profiler's report
            ("./torch_profile/eagle/eagle-1-TP-0.trace.json.gz", b"gz"),  # not its trace
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    with file_results.unpacked_traces(folder) as n:
        assert n == 3
        assert (folder / "iters" / "nospec" / "iter-1.jsonl").read_text() == "{}\n"
        assert (folder / "iters" / "eagle" / "iter-2.jsonl").read_text() == "[]\n"
        assert [p.name for p in (folder / "torch_profile").iterdir()] == ["eagle.report.json"]
    assert not (folder / "iters").exists()  # never left for a commit
    assert not (folder / "torch_profile").exists()
    (folder / "iters").mkdir()  # a folder of its own: not overwritten, not removed
    with pytest.raises(SystemExit, match="exists"), file_results.unpacked_traces(folder):
        pass
    assert (folder / "iters").is_dir()
