"""``SPECFSM_SYNC_DEBUG=<flag file>`` (diagnosis only): while the flag file exists, the scheduler
runs under ``torch.cuda.set_sync_debug_mode("warn")`` and cProfile. Every call that makes the
host wait for the GPU is counted by its Python stack (the last frames) and the forward mode of
the batch launched last; when the flag goes away, ``<flag>.<pid>.json`` gets the iterations
per mode, the stacks with their counts, the profile's top functions by own time and the
scheduler's own functions (``SCHED_DIRS``) by cumulative time, and the window's wall time.

Loaded by sitecustomize.py (copied beside it) only when ``SPECFSM_SYNC_DEBUG`` is set; its
toggle runs in the ``Scheduler.run_batch`` wrapper there, beside the iteration trace.
"""

from __future__ import annotations

import json
import os
import time

_ST: dict = {
    "on": False,
    "checked": 0.0,
    "mode": "-",
    "iters": {},
    "stacks": {},
    "prof": None,
    "t0": 0.0,
}

#: the scheduler's own code (its loop, batches, KV pools, speculative workers): the
#: profile's entries from these folders are kept by cumulative time, so two servers' windows
#: can be set side by side function by function (sync_report.sched_diff): the scheduler's
#: own, and the forward's preparation and runners (model_executor, layers: whether a prefill
#: replays a graph or runs eagerly, which hidden states it keeps)
SCHED_DIRS = (
    "sglang/srt/managers/",
    "sglang/srt/speculative/",
    "sglang/srt/mem_cache/",
    "sglang/srt/model_executor/",
    "sglang/srt/layers/",
)
#: enough rows that a function both windows call is in both lists, not cut from one
SCHED_TOP = 1500


def _row(key, stat, cut: str) -> list:
    (fn, ln, name), (cc, _nc, tt, ct, _c) = key, stat
    return [f"{fn.split(cut)[-1]}:{ln} {name}", cc, round(tt, 4), round(ct, 4)]


def _warning(message, category, filename, lineno, file=None, line=None):
    if "synchroniz" not in str(message):
        return _ST["show"](message, category, filename, lineno, file, line)
    import traceback

    frames = [
        f
        for f in traceback.extract_stack()[:-1]
        if "warnings" not in f.filename and "hook_sync" not in f.filename
    ][-8:]
    where = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.name}" for f in frames]
    key = (_ST["mode"], *where)
    _ST["stacks"][key] = _ST["stacks"].get(key, 0) + 1


def toggle(flag: str, mode: str) -> None:
    """Called before each scheduler iteration of forward mode `mode` (E, D, I): turns the
    window on or off as the flag file appears or goes, and counts the iteration while on."""
    now = time.time()
    st = _ST
    if now - st["checked"] > 0.25:
        st["checked"] = now
        want = os.path.exists(flag)
        if want != st["on"]:
            import cProfile
            import pstats
            import warnings

            import torch

            st["on"] = want
            if want:
                st["show"] = warnings.showwarning
                warnings.filterwarnings("always", message=".*synchroniz.*")
                warnings.showwarning = _warning
                st["iters"], st["stacks"] = {}, {}
                st["t0"] = now
                st["prof"] = cProfile.Profile()
                st["prof"].enable()
                if torch.cuda.is_available():
                    torch.cuda.set_sync_debug_mode(1)
            else:
                if torch.cuda.is_available():
                    torch.cuda.set_sync_debug_mode(0)
                st["prof"].disable()
                warnings.showwarning = st["show"]
                ps = pstats.Stats(st["prof"])
                top = sorted(ps.stats.items(), key=lambda kv: -kv[1][2])[:60]
                ours = sorted(
                    (kv for kv in ps.stats.items() if "specfsm_sglang" in kv[0][0]),
                    key=lambda kv: -kv[1][3],
                )[:40]
                sched = sorted(
                    (kv for kv in ps.stats.items() if any(d in kv[0][0] for d in SCHED_DIRS)),
                    key=lambda kv: -kv[1][3],
                )[:SCHED_TOP]
                rec = {
                    "wall_s": round(now - st["t0"], 3),
                    "iters": st["iters"],
                    "stacks": sorted(
                        ([n, *k] for k, n in st["stacks"].items()), key=lambda r: -r[0]
                    ),
                    "profile_top_tottime": [_row(k, v, "site-packages/") for k, v in top],
                    "profile_specfsm_cumtime": [_row(k, v, "/adapters/") for k, v in ours],
                    "profile_sched_cumtime": [_row(k, v, "site-packages/") for k, v in sched],
                }
                with open(f"{flag}.{os.getpid()}.json", "w") as fh:
                    json.dump(rec, fh)
    if st["on"]:
        st["mode"] = mode
        st["iters"][mode] = st["iters"].get(mode, 0) + 1
