"""A torch-profiler window on a running SGLang server (``serving_bench.py --torch-profile
STEPS``): :func:`window` plays a closed-loop load against it and, once steady, asks SGLang's own
profiler (``POST /start_profile``) for ``steps`` forward passes; SGLang stops it by itself after
them and writes ``<label>-<id>-TP-<rank>.trace.json.gz`` into the directory sent.
:func:`run_windows` takes one per profiled label after a server's runs and saves and prints its
report (`torch_profile`).

Standard library only.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import client
import torch_profile
import traces

BIG = 40 << 20  # a trace over this leaves the mirrored folder (its report stays)


def _post(url: str, body: dict[str, Any] | None, timeout: float) -> None:
    data = json.dumps(body or {}).encode()
    hdr = {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=hdr, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        resp.read()


def _settle(d: Path, wait: float) -> list[Path]:
    """The trace files in ``d`` once they exist, stop growing and read to their end (the
    exporter gzips as it writes); ``[]`` after ``wait`` seconds."""
    deadline, last = time.monotonic() + wait, None
    while time.monotonic() < deadline:
        files = torch_profile.traces_in(d)
        sizes = [p.stat().st_size for p in files]
        if files and sizes == last:
            try:
                for p in (p for p in files if p.name.endswith(".gz")):
                    with gzip.open(p, "rb") as fh:
                        while fh.read(1 << 22):
                            pass
                return files
            except (OSError, EOFError):
                pass
        last = sizes
        time.sleep(0.5)
    return []


def window(
    url: str,
    out_dir: Path,
    label: str,
    trace: traces.Trace,
    level: int,
    seconds: float,
    steps: int,
    procs: int,
) -> Path | None:
    """Profile ``steps`` forward passes of the server at ``url`` under a closed loop of
    ``level`` requests of ``trace``'s lengths (none cut) for ``seconds``: the directory of the
    trace files (``out_dir/label``), or None, said on stdout, when the server is unreachable,
    refuses the profiler or writes nothing within 60 s of the load's end. Never raises for
    those, so the benchmark goes on to its other servers."""
    dst = (out_dir / label).resolve()

    def say(text: str) -> None:
        print(f"[torch-profile] {label}: {text}", flush=True)

    try:
        urllib.request.urlopen(url + "/health", timeout=10).close()
    except OSError as exc:
        say(f"server not reachable ({exc}); no window")
        return None
    dst.mkdir(parents=True, exist_ok=True)
    for old in torch_profile.traces_in(dst):
        old.unlink()
    lengths = dataclasses.replace(trace.lengths, abort_share=0.0)
    phase = traces.Phase("closed", level, seconds)
    win = dataclasses.replace(trace, name="torch_profile", lengths=lengths, phases=(phase,))
    t0: list[float] = []
    failed: list[str] = []

    def play() -> None:
        try:
            n = max(1, min(procs, level))
            client.play(win, url, out_dir / "requests" / label, n, t0.append)
        except (RuntimeError, OSError) as exc:
            failed.append(str(exc))

    th = threading.Thread(target=play, daemon=True)
    th.start()
    while not t0 and th.is_alive():
        time.sleep(0.05)
    time.sleep(max(0.0, (t0 or [0.0])[0] + seconds / 3 - time.time()))  # past the ramp
    # one trace over every stage; Python stacks and shapes would multiply size and overhead
    body = {"output_dir": str(dst), "num_steps": steps, "profile_prefix": label}
    body |= {"activities": ["CPU", "GPU"], "with_stack": False, "record_shapes": False}
    try:
        _post(url + "/start_profile", body, 120)
    except OSError as exc:
        say(f"/start_profile refused: {exc}")
        return None
    finally:
        th.join(seconds + 120)
    if failed:
        say(f"load client failed: {failed[0]}")
    files = _settle(dst, 5.0)
    if not files:  # the load ended before `steps` forwards: stop it so the trace is written
        try:
            _post(url + "/stop_profile", None, 300)
        except OSError as exc:
            say(f"/stop_profile: {exc}")
        files = _settle(dst, 60.0)
    if not files:
        say(f"no trace file in {dst}")
        return None
    say(f"{len(files)} trace file(s), {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")
    return dst


def run_windows(
    args: Any,
    srv: Any,
    name: str,
    variants: list[str],
    tr: dict[str, traces.Trace],
    out: Path,
    prepare: Callable[[Any, str, Any], None],
    mirror: Callable[[Any, Path], None],
) -> None:
    """After a server's measured runs, for each label in ``args.torch_profile_of`` (all when
    empty): its variant set, a window of ``args.torch_profile`` steps at
    ``args.torch_profile_level`` requests of the first trace's lengths, its report saved
    (``<label>.report.json``) and printed, a trace over 40 MB moved to the unmirrored
    ``torch_profile_traces/``, the results mirrored."""
    want = {x for x in args.torch_profile_of.split(",") if x}
    first, root, steps = next(iter(tr.values())), out / "torch_profile", args.torch_profile
    seconds = 6.0 + 0.03 * steps  # `steps` forwards fit in the last two thirds
    for var in variants:
        label = f"{name}_{var}" if var else name
        if want and label not in want:
            continue
        prepare(srv, var, args)
        lvl = args.torch_profile_level
        got = window(srv.url, root, label, first, lvl, seconds, steps, args.procs)
        if got is not None:
            try:
                rep = torch_profile.report(got)
                (root / f"{label}.report.json").write_text(json.dumps(rep, indent=1) + "\n")
                print("\n".join(torch_profile.lines(label, rep)), flush=True)
            except Exception as exc:  # an analysis step: the servers after this one still run
                print(f"[torch-profile] {label}: report failed: {exc!r}", flush=True)
            for p in (p for p in torch_profile.traces_in(got) if p.stat().st_size > BIG):
                (out / "torch_profile_traces" / label).mkdir(parents=True, exist_ok=True)
                shutil.move(p, out / "torch_profile_traces" / label / p.name)
        mirror(args, out)
