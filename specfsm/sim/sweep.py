"""The plumbing of a long simulated sweep (benchmarks/policy_sweep.py, context_sweep.py,
shape_check.py): its runs on a process pool, each finished run appended to a JSON lines file
as it comes in (a crash or a ^C keeps what was done, and ``--resume`` reuses it), and the
optional plots drawn last, each failing one reported in one line.

A journal's first line is ``{"meta": ...}`` (what its runs depend on besides their tasks: the
tables' contents), then one ``{"task": [...], "result": ...}`` per finished run. A resumed
journal whose meta differs reuses nothing. It cannot notice a change of the simulator's code:
resume only a sweep of the same checkout.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TextIO, TypeVar

import attrs

from specfsm.model.costs import load_table, table_stem
from specfsm.progress import Progress
from specfsm.sim.engine import RunResult

T = TypeVar("T", bound=tuple[Any, ...])  # a task: a tuple of JSON values
R = TypeVar("R")  # its result


def task_key(task: Iterable[Any]) -> str:
    return json.dumps(list(task))


def table_digests(tables: Iterable[str]) -> dict[str, str]:
    """Each table argument's rows, hashed (a journal's meta: the same name, other numbers)."""
    return {
        t: hashlib.sha256(repr(sorted(load_table(t).rows)).encode()).hexdigest()[:16]
        for t in dict.fromkeys(tables)
    }


def unique_stems(tables: Iterable[str]) -> dict[str, str]:
    """`table_stem` of each table argument, numbered (``t``, ``t-2``) where two share one."""
    out: dict[str, str] = {}
    for t in dict.fromkeys(tables):
        stem, n = table_stem(t), 2
        name = stem
        while name in out.values():
            name, n = f"{stem}-{n}", n + 1
        out[t] = name
    return out


class Journal:
    """The finished runs of a sweep, one JSON line each, written and flushed as each finishes.

    With ``resume``, the runs already in `path` under the same `meta` are read back into
    `done` (a line cut short by a crash is skipped) and new ones appended; otherwise the file
    starts afresh. `note` says which happened."""

    def __init__(self, path: str, meta: dict[str, Any], resume: bool = False) -> None:
        self.path = path
        self.done: dict[str, Any] = {}
        text = ""
        if resume and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                text = f.read()
        lines = text.splitlines()
        old_meta = _json_or_none(lines[0]) if lines else None
        same = isinstance(old_meta, dict) and old_meta.get("meta") == _json_round_trip(meta)
        if same:
            for line in lines[1:]:
                rec = _json_or_none(line)
                if isinstance(rec, dict) and "task" in rec and "result" in rec:
                    self.done[task_key(rec["task"])] = rec["result"]
            self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
            if not text.endswith("\n"):
                self._f.write("\n")
        else:
            self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed by close())
            self._f.write(json.dumps({"meta": meta}) + "\n")
            self._f.flush()
        if not resume:
            self.note = f"each finished run is written to {path} (--resume reuses them)"
        elif same:
            self.note = f"resuming: {len(self.done)} finished runs read from {path}"
        else:
            why = "not found" if not text else "written with other tables or settings"
            self.note = f"--resume: {path} {why}; every run starts afresh"

    def write(self, task: Iterable[Any], result: Any) -> None:
        self._f.write(json.dumps({"task": list(task), "result": result}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _json_or_none(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _json_round_trip(x: Any) -> Any:
    return json.loads(json.dumps(x))


class _Indexed(Generic[T, R]):
    """`fn` of an (index, task) pair, keeping the index (picklable: `fn` goes by name)."""

    def __init__(self, fn: Callable[[T], R]) -> None:
        self.fn = fn

    def __call__(self, item: tuple[int, T]) -> tuple[int, R]:
        return item[0], self.fn(item[1])


def run_tasks(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    jobs: int,
    journal: Journal,
    encode: Callable[[R], Any],
    decode: Callable[[Any], R],
    label: str,
    what: Callable[[T], str] = str,
    method: str | None = None,
) -> list[R]:
    """`fn` of every task, in the tasks' order: read back from `journal` where it holds the
    task, else run on `jobs` processes (start method `method`, the platform's default if
    None), each result written to `journal` (``encode``d) as it finishes."""
    out: dict[int, R] = {}
    todo: list[tuple[int, T]] = []
    for i, t in enumerate(tasks):
        rec = journal.done.get(task_key(t))
        if rec is not None:
            out[i] = decode(rec)
        else:
            todo.append((i, t))
    prog = Progress(len(todo), label)
    if todo:
        with mp.get_context(method).Pool(max(1, jobs)) as pool:
            for i, r in pool.imap_unordered(_Indexed(fn), todo, chunksize=1):
                out[i] = r
                journal.write(tasks[i], encode(r))
                prog.tick(what(tasks[i]))
    return [out[i] for i in range(len(tasks))]


# ------------------------------------------------------------------------------ runs as JSON
#: what `run_to_json` keeps of a run with phases (the phase oracle's and the p99's inputs)
PHASE_LISTS = ("tpot_ms", "finish_t_s")
_PER_REQUEST = ("tpot_ms", "ttft_ms", "decode_ms", "decode_tokens", "window_tpot_ms", "finish_t_s")


@attrs.define
class StoredRun(RunResult):
    """A run read back by `run_from_json`: `row()` as it was, the per-request lists only as
    `run_to_json` kept them."""

    stored_row: dict[str, object] = attrs.Factory(dict)

    def row(self) -> dict[str, object]:
        return dict(self.stored_row)


def run_to_json(r: RunResult) -> dict[str, Any]:
    """`r`'s row and its fields, without the per-request lists but the TPOTs and finish
    times of a run with phases (a trace's oracle needs those; a long trace holds ~10^4)."""
    keep = PHASE_LISTS if r.phase_s > 0 else ()
    run = {
        f.name: [] if f.name in _PER_REQUEST and f.name not in keep else getattr(r, f.name)
        for f in attrs.fields(RunResult)
    }
    return {"row": r.row(), "run": run}


def run_from_json(d: dict[str, Any]) -> StoredRun:
    run = dict(d["run"])
    if run.get("timeline") is not None:
        run["timeline"] = [tuple(x) for x in run["timeline"]]
    return StoredRun(**run, stored_row=d["row"])


# ------------------------------------------------------------------------------ plots
def draw_optional(
    plots: Sequence[tuple[str, Callable[[], None]]], out: TextIO | None = None
) -> int:
    """Draw each (path, draw) in turn; a failure is one line on `out` (stdout by default) and
    the next plot is still drawn. Returns how many failed."""
    failed = 0
    for path, draw in plots:
        try:
            draw()
        except Exception as exc:  # a plot is optional: nothing it raises may lose the results
            failed += 1
            msg = str(exc).splitlines()[0] if str(exc) else ""
            print(f"plot {path} not written: {type(exc).__name__}: {msg}", file=out or sys.stdout)
    return failed
