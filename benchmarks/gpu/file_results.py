"""File a serving driver's results, as a wait call brought them back, into a results folder.

    python benchmarks/gpu/file_results.py --fetched DIR --folder benchmarks/gpu/results/NAME \\
        --name machine17 [--merge --traces heavy,day --phase-s 7]

``DIR`` holds what ``run_on_device.sh wait`` copies out of the driver's mirror:
``runs.jsonl``, ``serving_summary.txt`` (once the driver is done), ``serving_results.tgz``
(over 15 MiB, in parts: ``serving_results.tgz.partaa``, ``...ab``, joined here)
and the driver's log (``sv_drive.log``). The script writes ``FOLDER/NAME/``:

- ``runs.jsonl`` and ``serving_summary.txt`` as the machine wrote them;
- ``serving_call.log``: the driver's log;
- ``requests/``: every run's request records (the greedy comparison reads them);
- ``traces_logs_NAME.tgz``: the rest of the tgz (per-iteration traces, prefill timings, server
  logs, ``/metrics`` scrapes, the transition log and start-up profile, the host probe, the
  warm-up passes);

and ``FOLDER/logs/server_*.log`` (``--logs-beside``: ``FOLDER/NAME/server_*_lines.log``, for a
second driver of the same folder): the lines of each server log the summary and the docs
read (``LINES``), the rest staying in the tgz. With ``--merge`` it then runs ``merge.py
--refer --out FOLDER`` on every driver filed in the folder (each sub-folder with a
``runs.jsonl``, in the order they started, each one's repetitions numbered on from the last
one's: ``machine19:0 machine19b:2``; a driver measured apart belongs in a folder of its own)
and the summary (``serving_bench.py --bed gpu --summary-only --sim``) on the traces named,
with the drivers' per-iteration traces and profiler reports unpacked meanwhile. A folder that
already holds ``NAME/`` is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "serving"))
from summary import next_rep  # noqa: E402  (the serving benchmark's modules, as merge.py's)

#: the server-log lines a results folder keeps beside the tgz: the launch arguments, long
#: collections and /freeze_gc (serve_long_gc), the plugin's lines, draft-state builds, graph
#: captures and failures
LINES = re.compile(
    r"server_args|LONG GARBAGE|specfsm|Built adaptive|(?i:cuda graph (?:begin|end))"
    r"|OutOfMemory|Error|GET /freeze_gc"
)
#: members of the driver's tgz kept as files of their own rather than in the traces tgz
_OWN = ("runs.jsonl", "serving_summary.txt")


def _member_name(m: tarfile.TarInfo) -> str:
    return m.name[2:] if m.name.startswith("./") else m.name


def _results_tgz(fetched: Path) -> bytes | None:
    """The driver's ``serving_results.tgz``: whole, or joined from the parts a wait call split
    it into (``.part*``: a call brings back files of up to 16 MiB)."""
    whole = fetched / "serving_results.tgz"
    if whole.is_file():
        return whole.read_bytes()
    parts = sorted(fetched.glob("serving_results.tgz.part*"))
    return b"".join(p.read_bytes() for p in parts) if parts else None


def file_results(fetched: Path, folder: Path, name: str, logs_beside: bool = False) -> list[str]:
    """Write ``folder/name/`` and the kept server-log lines; one line per thing written."""
    dest = folder / name
    if dest.exists():
        raise SystemExit(f"{dest} exists: a second driver takes a name of its own")
    tgz = _results_tgz(fetched)
    if not (fetched / "runs.jsonl").is_file() or tgz is None:
        raise SystemExit(
            f"{fetched} holds no runs.jsonl or serving_results.tgz (whole or in parts): not "
            "what a wait call brings back"
        )
    dest.mkdir(parents=True)
    said = []
    for own in _OWN:
        if (fetched / own).is_file():
            shutil.copy2(fetched / own, dest / own)
            said.append(f"{dest / own}")
    log = next(
        (fetched / n for n in ("sv_drive.log", "serving.log") if (fetched / n).is_file()), None
    )
    if log is not None:
        shutil.copy2(log, dest / "serving_call.log")
        said.append(f"{dest / 'serving_call.log'} (from {log.name})")
    logs_dir = dest if logs_beside else folder / "logs"
    logs_dir.mkdir(exist_ok=True)
    rest = io.BytesIO()
    n_req = n_rest = 0
    with (
        tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as src,
        tarfile.open(fileobj=rest, mode="w:gz") as out,
    ):
        for m in src.getmembers():
            rel = _member_name(m)
            if not m.isfile() or rel in _OWN:
                continue
            data = src.extractfile(m)
            assert data is not None
            raw = data.read()
            if rel.startswith("requests/"):
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(raw)
                n_req += 1
                continue
            if rel.startswith("logs/server_") and rel.endswith(".log"):
                stem = Path(rel).stem
                kept = "".join(
                    row
                    for row in raw.decode(errors="replace").splitlines(keepends=True)
                    if LINES.search(row)
                )
                out_name = f"{stem}_lines.log" if logs_beside else f"{stem}.log"
                (logs_dir / out_name).write_text(kept)
                said.append(f"{logs_dir / out_name}: {kept.count(chr(10))} lines kept")
            m.name = rel  # the member as it was, without the leading "./"
            out.addfile(m, io.BytesIO(raw))
            n_rest += 1
    (dest / f"traces_logs_{name}.tgz").write_bytes(rest.getvalue())
    said.append(f"{dest}/requests/: {n_req} files")
    said.append(f"{dest}/traces_logs_{name}.tgz: {n_rest} files")
    return said


def _started(p: Path) -> tuple[str, str]:
    """The start of the driver whose folder holds ``p`` (its ``runs.jsonl`` header; "" where it
    has none) and the folder's name: what a folder's drivers are ordered by."""
    runs, started = p.parent / "runs.jsonl", ""
    if runs.is_file():
        with open(runs) as fh:
            started = str(json.loads(fh.readline()).get("started", ""))
    return started, p.parent.name


def drivers(folder: Path) -> list[str]:
    """The merge sources of every driver filed in `folder`: ``DIR:OFFSET``, in the order the
    drivers started, each one's repetitions numbered on from the last repetition before it
    (two drivers of two and three repetitions: ``A:0`` and ``B:2``)."""
    sources: list[str] = []
    offset = 0
    for runs in sorted(folder.glob("*/runs.jsonl"), key=_started):
        sources.append(f"{runs.parent}:{offset}")
        offset += next_rep(runs)
    return sources


#: the folders of the drivers' traces the summary reads: per-iteration traces (each server
#: start's file its own, so the drivers' files sit side by side) and the profiler's reports
SUMMARY_READS = ("iters", "torch_profile")


def _read_by_summary(rel: str) -> bool:
    if ".." in rel:
        return False
    if rel.startswith("iters/"):
        return True
    # the profiler's reports, not its traces (torch_profile/<label>/*.trace.json.gz)
    return rel.startswith("torch_profile/") and rel.count("/") == 1 and rel.endswith(".json")


@contextlib.contextmanager
def unpacked_traces(folder: Path) -> Iterator[int]:
    """What the summary reads of every filed driver's traces (`SUMMARY_READS`: a later
    driver's profiler report of a label over an earlier one's) unpacked into ``folder``
    meanwhile, removed after; yields how many files."""
    targets = [folder / d for d in SUMMARY_READS]
    for target in targets:
        if target.exists():
            raise SystemExit(f"{target} exists: the summary would read it as this folder's")
    n = 0
    try:
        for tgz in sorted(folder.glob("*/traces_logs_*.tgz"), key=_started):
            with tarfile.open(tgz, "r:gz") as tf:
                for m in tf.getmembers():
                    rel = _member_name(m)  # a tgz packed by hand names them ./iters/...
                    if m.isfile() and _read_by_summary(rel):
                        data = tf.extractfile(m)
                        assert data is not None
                        dest = folder / rel
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(data.read())
                        n += 1
        yield n
    finally:
        for target in targets:
            shutil.rmtree(target, ignore_errors=True)


def summarize(folder: Path, traces: str, phase_s: float) -> None:
    """Merge every driver filed in ``folder`` into it (references to their request files) and
    write the folder's summary with the simulator beside it, the drivers' per-iteration traces
    and profiler reports unpacked meanwhile."""
    py = sys.executable
    # the folder's runs.jsonl is the merge of its drivers: written again from all of them
    (folder / "runs.jsonl").unlink(missing_ok=True)
    merge = [py, str(ROOT / "benchmarks/serving/merge.py"), "--refer", "--out", str(folder)]
    subprocess.run([*merge, *drivers(folder)], check=True)
    bench = [py, str(ROOT / "benchmarks/serving_bench.py"), "--bed", "gpu", "--summary-only"]
    bench += ["--sim", "--traces", traces, "--phase-s", f"{phase_s:g}", "--out", str(folder)]
    with unpacked_traces(folder):
        subprocess.run(bench, check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fetched", type=Path, required=True, help="what a wait call brought back")
    ap.add_argument("--folder", type=Path, required=True, help="the results folder")
    ap.add_argument("--name", required=True, help="the driver's sub-folder, e.g. machine17")
    ap.add_argument(
        "--logs-beside",
        action="store_true",
        help="keep the server-log lines in FOLDER/NAME/server_*_lines.log (a second driver)",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="then merge every driver filed in the folder and summarize it",
    )
    ap.add_argument("--traces", default="", help="the traces to summarize (with --merge)")
    ap.add_argument("--phase-s", type=float, default=7.0)
    args = ap.parse_args(argv)
    if args.merge and not args.traces:
        ap.error("--merge needs --traces (those the driver ran)")
    for line in file_results(args.fetched, args.folder, args.name, args.logs_beside):
        print(line)
    if args.merge:
        summarize(args.folder, args.traces, args.phase_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
