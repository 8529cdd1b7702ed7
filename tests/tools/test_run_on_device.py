"""benchmarks/gpu/run_on_device.sh's `detach` and `wait` stages, on this machine with stages
that need no GPU: the driver outlives the call, the call returns as soon as the driver's log
says it is done and brings its log and results back (a results tgz too large for one file in
parts), and a second driver is refused while the first runs."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "run_on_device.sh"


def _call(tmp: Path, stages: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "WAIT_S": "60",
        "MIRROR": str(tmp / "mirror"),
        "DRIVE_LOG": str(tmp / "drive.log"),
        "OUT": str(tmp / "out"),
        "WORK": str(tmp / "work"),
        "SITE": str(tmp / "site"),
        "DETACH_STAGES": stages,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_a_detached_driver_is_waited_on_and_its_results_come_back(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    (tmp_path / "mirror" / "runs.jsonl").write_text("{}\n")  # what a driver's mirror holds
    t0 = time.monotonic()
    got = _call(tmp_path, "jitunpack", "detach")
    assert got.returncode == 0, got.stderr
    assert time.monotonic() - t0 < 30  # not the whole WAIT_S: the driver's log said it was done
    assert "detach: driver started" in got.stdout and "1 driver(s) done" in got.stdout
    assert "all stages done" in (tmp_path / "out" / "drive.log").read_text()
    assert (tmp_path / "out" / "runs.jsonl").read_text() == "{}\n"


def test_a_second_driver_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    (tmp_path / "drive.log").write_text("[run_on_device +0s] serving: start (defaults)\n")
    got = _call(tmp_path, "jitunpack", "detach")
    assert "a driver is still running" in got.stdout, got.stdout
    assert "driver started" not in got.stdout
    assert (tmp_path / "drive.log").read_text().count("\n") == 1  # its log left as it was


def test_no_driver_is_detached_while_a_serving_benchmark_runs(tmp_path: Path) -> None:
    """Two drivers at once would share the GPU: a benchmark already running (here a stand-in
    of that command line that sleeps) refuses the second whatever its log."""
    import sys

    fake = tmp_path / "bed" / "benchmarks" / "serving_bench.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("import time\ntime.sleep(60)\n")
    running = subprocess.Popen([sys.executable, "benchmarks/serving_bench.py"], cwd=fake.parents[1])
    try:
        time.sleep(0.5)
        got = _call(tmp_path, "jitunpack", "detach")
    finally:
        running.kill()
        running.wait()
    assert "a serving benchmark is running on this machine" in got.stdout, got.stdout
    assert not (tmp_path / "drive.log").exists()


def test_a_results_tgz_over_15_mib_comes_back_in_parts(tmp_path: Path) -> None:
    (tmp_path / "mirror").mkdir()
    data = os.urandom(1 << 20) * 17  # 17 MiB: a call brings back files of up to 16 MiB
    (tmp_path / "mirror" / "serving_results.tgz").write_bytes(data)
    (tmp_path / "drive.log").write_text("[run_on_device +9s] all stages done\n")
    got = _call(tmp_path, "", "wait")
    assert got.returncode == 0, got.stderr
    assert "split into 2 parts of 15 MiB" in got.stdout, got.stdout
    out = tmp_path / "out"
    assert not (out / "serving_results.tgz").exists()
    parts = sorted(out.glob("serving_results.tgz.part*"))
    assert [p.name[-2:] for p in parts] == ["aa", "ab"]
    assert b"".join(p.read_bytes() for p in parts) == data
    assert (tmp_path / "mirror" / "serving_results.tgz").stat().st_size == len(data)
