"""``SPECFSM_ITER_TRACE=<dir>``: one record per scheduler iteration (``Scheduler.run_batch``):
wall time at launch, forward mode (E extend, M extend mixed with decode rows, D decode,
I idle), batch size, extend tokens, queued and running requests, free KV slots; with
``SPECFSM_ITER_PHASES=1`` the host time of the loop's parts since the last launch after them
(hook_phases.py). No synchronize: with overlap on, the gap to the next launch is the
iteration's wall time as served. The serving benchmark (benchmarks/serving/iters.py) reads
the files, ``iter-<pid>.jsonl`` in the directory named.

Loaded by sitecustomize.py (copied beside it); its ``Scheduler.run_batch`` wrapper calls
:func:`record`.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time

_DIR = os.environ["SPECFSM_ITER_TRACE"]
phases = __import__("hook_phases") if os.environ.get("SPECFSM_ITER_PHASES") else None
_BUF: list = []
_LOCK = threading.Lock()
_IDLE: list = []  # the pid whose idle flusher runs (a spawned child starts its own)


def flush() -> None:
    with _LOCK:
        if _BUF:
            with open(os.path.join(_DIR, f"iter-{os.getpid()}.jsonl"), "a") as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in _BUF))
            _BUF.clear()


def _idle_flusher() -> None:
    # a scheduler that goes idle records nothing more, so the buffer would wait for the next
    # iteration, and a server stopped after its last run (its scheduler killed, no atexit)
    # would lose that run's last second: written once the scheduler has been quiet a while
    # (within half a second of its last iteration: a driver waits longer before a stop)
    while True:
        time.sleep(0.25)
        try:
            with _LOCK:  # the scheduler thread may be flushing the same buffer
                quiet = bool(_BUF) and time.time() - _BUF[-1][0] > 0.25
            if quiet:
                flush()
        except Exception as exc:  # a trace must never break the server
            print(f"[iter-trace] {type(exc).__name__}: {exc}", file=sys.stderr)


def record(sched, batch, fm) -> None:
    mode = "M" if fm.is_mixed() else "E" if fm.is_extend() else "D"
    mode = mode if fm.is_extend() or fm.is_decode() else "I"
    ext = int(getattr(batch, "extend_num_tokens", 0) or 0) if mode in "EM" else 0
    running = sched.running_batch.batch_size() if sched.running_batch is not None else 0
    free = sched.token_to_kv_pool_allocator.available_size()
    row = [round(time.time(), 5), mode, batch.batch_size(), ext, len(sched.waiting_queue)]
    row += [running, int(free)]
    if phases is not None:
        row += phases.take()
    with _LOCK:
        _BUF.append(row)
        full = len(_BUF) >= 256 or _BUF[-1][0] - _BUF[0][0] > 1.0
    if full:
        flush()
    if os.getpid() not in _IDLE:
        _IDLE[:] = [os.getpid()]
        threading.Thread(target=_idle_flusher, name="iter-trace", daemon=True).start()


os.makedirs(_DIR, exist_ok=True)
atexit.register(flush)
