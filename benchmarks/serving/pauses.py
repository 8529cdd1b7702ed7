"""Stream pauses: stretches where requests were streaming and no token reached the client.

A server decoding a batch sends each streaming request a token every step (10-60 ms on the
H200); a prefill backlog stops decode, but each prefill chunk completes prompts whose first
tokens arrive at its end (an 8192-token chunk took ~190 ms there). So a stretch of at least
`MIN_S` in which some request was streaming throughout and no token of any request arrived is
not the scheduler's work: on the H200 (2026-12-05) such pauses of 0.35-0.6 s, the server's
HTTP side admitting and streaming nothing while its scheduler kept decoding, were in nearly
every bursty run of every server, and one that straddled the window's end held a run's last
decoded tokens past it (0.940 of the server without speculation where its other runs read
1.015 and 0.994). A run's pauses are measured from its token bins (`client.BIN_S`), which the
saved request files drop, so runs recorded before this module have none.

Beside them, the servers' own long garbage collections: the GPU bed launches every server with
SGLang's ``--gc-warning-threshold-secs`` (0.1 s), whose warning lines `long_gc` counts in each
server's log, and says how many of the pauses of that server's runs fall in one. A warning's
time is the log's, to the second, when the collection ended; the log's clock is read as UTC (the
GPU box's and the CPU bed's), against the runs' start times (``t0``, seconds since the epoch).

Standard library only.
"""

from __future__ import annotations

import calendar
import gzip
import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client import BIN_S
from servers import server_of

#: the shortest silence reported (s)
MIN_S = 0.3


def find(recs: Sequence[dict[str, Any]]) -> list[list[float]]:
    """[start s, seconds, requests streaming at its start] of every pause of a run's requests
    (times since the run's start, as the records keep them)."""
    ends = [float(r["t_end"]) for r in recs if "t_end" in r]
    if not ends:
        return []
    n = math.ceil(max(ends) / BIN_S) + 1
    tokens = [0] * n
    streaming = [0] * (n + 1)
    for r in recs:
        for k, v in (r.get("bins") or {}).items():
            if 0 <= int(k) < n:
                tokens[int(k)] += int(v)
        if "t_first" not in r or "t_end" not in r:
            continue
        # the bins the request streamed through whole: after its first token, before its end
        a, b = math.ceil(float(r["t_first"]) / BIN_S), math.floor(float(r["t_end"]) / BIN_S)
        if a < b:
            streaming[a] += 1
            streaming[b] -= 1
    out: list[list[float]] = []
    live, start = 0, -1
    need = round(MIN_S / BIN_S)
    for i in range(n + 1):
        if i < n:
            live += streaming[i]
        silent = i < n and live > 0 and tokens[i] == 0
        if silent and start < 0:
            start, at_start = i, live
        elif not silent and start >= 0:
            if i - start >= need:
                out.append([round(start * BIN_S, 3), round((i - start) * BIN_S, 3), at_start])
            start = -1
    return out


def line(trace: str, label: str, seconds: float, runs: Sequence[dict[str, Any]]) -> str | None:
    """``serve_stream_pauses[T][S]`` over the runs that measured them: pauses per run, the
    longest, and how many reached past the window's end (`seconds` after the start)."""
    measured = [r for r in runs if "stream_pauses" in r]
    if not measured:
        return None
    every = [(r["rep"], p) for r in measured for p in r["stream_pauses"]]
    counts = ", ".join(str(len(r["stream_pauses"])) for r in measured)
    text = f"serve_stream_pauses[{trace}][{label}]: {len(every) / len(measured):.1f} per run"
    text += f" (runs: {counts})"
    if every:
        rep, (start, length, live) = max(every, key=lambda x: x[1][1])
        edge = sum(p[0] < seconds < p[0] + p[1] for _, p in every)
        text += (
            f"; longest {length:.1f} s at +{start:.1f} s in rep {rep} ({live} requests"
            f" streaming); {edge} across the window's end"
        )
    return text + f" (info: >= {MIN_S:g} s with requests streaming and no token arriving)"


#: a warning line; its time from the line's leading "[YYYY-MM-DD HH:MM:SS ...]" where it has one
_GC = re.compile(
    r"^(?:\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]\n]*\] )?.*?"
    r"LONG GARBAGE COLLECTION DETECTED \| Generation (\S+) \| Duration: ([0-9.]+)s",
    re.M,
)


def collections(text: str) -> list[tuple[float, float, str]]:
    """(the second the warning was logged, since the epoch, NaN for a line without a time;
    seconds; generation) of each long collection in a server log's text."""
    out = []
    for stamp, gen, dur in _GC.findall(text):
        at = calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) if stamp else math.nan
        out.append((float(at), float(dur), gen))
    return out


def after_freeze(text: str) -> int | None:
    """How many of a server log's long collections came after SGLang's ``/freeze_gc`` answered
    since that server's last start (a log may hold several starts of one server), or None where
    the log shows no ``/freeze_gc``: a collection before it falls in the warm-up pass."""
    if '"GET /freeze_gc' not in text:
        return None
    frozen, n = False, 0
    for row in text.splitlines():
        if "server_args=" in row:
            frozen = False
        elif '"GET /freeze_gc' in row and " 200" in row:
            frozen = True
        elif _GC.match(row):  # a collection as `collections` reads it
            n += frozen
    return n


def in_collection(start: float, length: float, found: Sequence[tuple[float, float, str]]) -> bool:
    """Whether a pause [start, start + length] (since the epoch) overlaps a collection that
    ended within the second its warning names (a bin's width of slack either side)."""
    return any(at - dur - length - BIN_S < start < at + 1.0 + BIN_S for at, dur, _ in found)


def long_gc(logs: Path, runs: Sequence[dict[str, Any]] = ()) -> list[str]:
    """``serve_long_gc[SERVER]`` per server log in `logs` (``server_<name>.log``) launched with
    the warning on: collections over the threshold, the longest and its generation, and how
    many of the stream pauses of the server's `runs` (those with a start time) fall in one."""
    out = []
    # a committed results folder keeps its larger logs gzipped (a device call carries the tree)
    paths = sorted([*logs.glob("server_*.log"), *logs.glob("server_*.log.gz")])
    names = [log.name.split(".")[0][len("server_") :] for log in paths]
    for log, name in zip(paths, names, strict=True):
        raw = log.read_bytes()
        text = (gzip.decompress(raw) if log.suffix == ".gz" else raw).decode(errors="replace")
        if "gc_warning_threshold_secs=0.0" in text or "gc_warning_threshold_secs" not in text:
            continue
        found = collections(text)
        line = f"serve_long_gc[{name}]: {len(found)}"
        if found:
            d, _, g = max((d, at, g) for at, d, g in found)
            line += f", longest {d:.2f} s (generation {g})"
            late = after_freeze(text)
            if late is not None:
                line += f", {late} after /freeze_gc"
        mine = [r for r in runs if server_of(str(r.get("server", "")), names) == name]
        timed = [r for r in mine if "t0" in r and "stream_pauses" in r]
        every = [(float(r["t0"]) + p[0], p[1]) for r in timed for p in r["stream_pauses"]]
        if every:
            hit = sum(in_collection(a, b, found) for a, b in every)
            line += f"; {hit} of the {len(every)} stream pauses of its runs in one"
        out.append(line + " (info: SGLang's warnings of a garbage collection over its threshold)")
    return out
