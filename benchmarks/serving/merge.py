"""Put the runs of several serving-benchmark folders into one, for one summary.

    python benchmarks/serving/merge.py --out DIR SRC:OFFSET[:LABEL,LABEL...] ...

Each source is a results folder (its ``runs.jsonl`` and ``requests/``). Its repetitions are
renumbered ``rep + OFFSET``, so that runs measured together keep sharing a repetition number
and runs of different folders never do: the summary pairs two servers only on the repetitions
they share (a ratio never divides a run by one from another machine unless the folders were
measured that way), and says so where two servers share none. Every run and server record
keeps where it came from (``source``, ``rep_measured``); each folder's header is kept, so the
summary names every command. LABELs keep only those servers' runs (``adaptive``, or
``specfsm_plain``); a server record (start time, KV pool) is kept when one of its runs is, or,
with no LABELs, when the server ran none (started for its KV pool alone), and a server's
failed start whenever its label is kept.
A folder's ``requests/`` files are copied under their new repetition numbers, so the greedy
comparison with the no-speculation server runs on the merged folder as on a measured one;
with ``--refer`` each run names its source file instead (``requests_file``, relative to the
merged folder; the summary reads it from there), for sources kept beside the merged folder,
so that a merge of committed folders adds no second copy of their requests. A run whose
requests are still a folder (cut by a time limit) is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from servers import server_of


def parse_source(text: str) -> tuple[Path, int, set[str]]:
    """``DIR:OFFSET[:LABEL,LABEL]`` -> (folder, repetition offset, labels kept; empty: all)."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"source {text!r}: expected DIR:OFFSET[:LABEL,LABEL...]")
    labels = {x for x in parts[2].split(",") if x} if len(parts) == 3 else set()
    return Path(parts[0]), int(parts[1]), labels


def _keep(label: str, labels: set[str]) -> bool:
    return not labels or label in labels


def merge(
    sources: list[tuple[Path, int, set[str]]], out: Path, argv: list[str], refer: bool = False
) -> list[str]:
    """Write ``out/runs.jsonl`` and ``out/requests/`` (``refer``: the runs' references to the
    sources' request files instead) from the sources; one line per source. The first record
    is the merge's own header (``argv``); a source's header is kept when a record it
    introduced is."""
    out.mkdir(parents=True, exist_ok=True)
    if not refer:
        (out / "requests").mkdir(exist_ok=True)
    lines: list[str] = []
    said: list[str] = []
    bed = "?"
    for folder, offset, labels in sources:
        recs = [json.loads(x) for x in (folder / "runs.jsonl").read_text().splitlines() if x]
        runs = [r for r in recs if "trace" in r and _keep(r["server"], labels)]
        runs = [r for r in runs if _requests_ok(folder, r)]
        # a run's label is its server's name (``specfsm_shapes``) or the server and a variant
        # (``specfsm_goodput``)
        names = {r["server"] for r in recs if "trace" not in r and "server" in r}
        kept_servers = {server_of(r["server"], names) for r in runs}
        ran = {server_of(r["server"], names) for r in recs if "trace" in r}
        pending: dict[str, Any] | None = None
        for r in recs:
            if "started" in r:
                pending = {**r, "source": folder.name, "rep_offset": offset}
                bed = r.get("bed", bed)
                continue
            tagged: dict[str, Any] = {**r, "source": folder.name}
            if "trace" in r:
                if r not in runs:
                    continue
                tagged["rep"] = r["rep"] + offset
                tagged["rep_measured"] = r["rep"]
                src = _source(folder, r)
                if src.exists() and refer:
                    tagged["requests_file"] = os.path.relpath(src, out)
                elif src.exists():
                    shutil.copyfile(src, out / "requests" / _name(r, r["rep"] + offset))
            elif "start_failed" in r:
                # a server that never came up has no runs, yet its failure is the finding
                if not _keep(str(r.get("server")), labels):
                    continue
            elif r.get("server") not in kept_servers and (labels or r.get("server") in ran):
                # a server with no run at all was started for its KV pool alone
                # (``--reps-of eagle=0``): its record is the figure, kept unless filtered out
                continue
            if pending is not None:
                lines.append(json.dumps(pending))
                pending = None
            lines.append(json.dumps(tagged))
        said.append(
            f"{folder}: {len(runs)} runs, repetitions +{offset}"
            + (f", only {','.join(sorted(labels))}" if labels else "")
        )
    head = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "argv": argv,
        "bed": bed,
        "merged": [str(f) for f, _, _ in sources],
    }
    (out / "runs.jsonl").write_text("".join(x + "\n" for x in [json.dumps(head), *lines]))
    return said


def _name(r: dict[str, Any], rep: int) -> str:
    return f"{r['server']}_{r['trace']}_rep{rep}.jsonl.gz"


def _source(folder: Path, r: dict[str, Any]) -> Path:
    """The request file of run `r` in its source folder."""
    return folder / "requests" / _name(r, r["rep"])


def _requests_ok(folder: Path, r: dict[str, Any]) -> bool:
    """False for a run whose requests were never closed into a file (a cut call)."""
    return bool(r.get("from_log")) or _source(folder, r).exists()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("sources", nargs="+", help="DIR:OFFSET[:LABEL,LABEL...]")
    ap.add_argument(
        "--refer",
        action="store_true",
        help="name the sources' request files instead of copying them (sources kept beside)",
    )
    args = ap.parse_args(argv)
    try:
        sources = [parse_source(s) for s in args.sources]
    except ValueError as e:
        ap.error(str(e))
    if (args.out / "runs.jsonl").exists():
        ap.error(f"{args.out}/runs.jsonl exists: merge into a new folder")
    argv = ["benchmarks/serving/merge.py", *(argv if argv is not None else sys.argv[1:])]
    for line in merge(sources, args.out, argv, args.refer):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
