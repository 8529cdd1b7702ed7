"""Host time of each part of a scheduler iteration, appended to the iteration trace
(``SPECFSM_ITER_TRACE``; diagnosis: where a loop iteration's host time goes, server beside
server).

With overlap on, the GPU idles between two prefills while the host runs whatever lies between
its wait for the GPU and the next launch; which part of the loop that is, and how long each
part takes on each server, is what these fields tell apart. Record k of the trace (written as
launch k starts) gains the host milliseconds spent since launch k-1 started in:

=======  ===================================================================================
run      ``Scheduler.run_batch`` of launch k-1 (its model-worker batch, the forward's launch)
worker   inside it, the model worker's ``forward_batch_generation`` (a speculative server:
         the EAGLE worker's, with any plugin's hooks around it)
target   inside that, the target's ``TpModelWorker.forward_batch_generation``
plan     inside that, the attention backend's ``init_forward_metadata`` (FlashInfer: a
         prefill's planning copies its index arrays to the host, a wait for the GPU)
result   ``Scheduler.process_batch_result`` (the batch launched before)
next     ``Scheduler.get_next_batch_to_run`` (launch k's planning)
=======  ===================================================================================

The rest of the gap (receiving requests, the loop's own steps) is the gap less run, result and
next. The scheduler's methods are timed on the instance at its first launch, so hooks a plugin
patched into the class are inside them; the target forward and the attention backend are
timed on the class. A ``time.perf_counter`` pair per timed call, nothing on the GPU.

Loaded by sitecustomize.py (copied beside it) when ``SPECFSM_ITER_PHASES`` is set with the
iteration trace; benchmarks/serving/prefill_gaps.py reads the fields.
"""

from __future__ import annotations

import time

#: the order of the fields appended to an iteration record
FIELDS = ("run", "worker", "target", "plan", "result", "next")
RUN, WORKER, TARGET, PLAN, RESULT, NEXT = range(len(FIELDS))

_acc = [0.0] * len(FIELDS)


def timed(fn, slot: int):
    """``fn`` with its host time added to ``slot``."""

    def inner(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _acc[slot] += time.perf_counter() - t

    inner.__wrapped__ = fn
    return inner


def wrap_class(cls, name: str, slot: int) -> None:
    setattr(cls, name, timed(getattr(cls, name), slot))


def attach(sched) -> None:
    """At a scheduler's first launch: time its planning, its result processing and its model
    worker's forward as the instance's attributes (outside any hook patched into the class)."""
    if getattr(sched, "_phases_attached", False):
        return
    sched._phases_attached = True
    sched.get_next_batch_to_run = timed(sched.get_next_batch_to_run, NEXT)
    sched.process_batch_result = timed(sched.process_batch_result, RESULT)
    worker = sched.model_worker
    worker.forward_batch_generation = timed(worker.forward_batch_generation, WORKER)


def add(slot: int, seconds: float) -> None:
    _acc[slot] += seconds


def take() -> list[float]:
    """The milliseconds gathered since the last call, in ``FIELDS`` order; starts again."""
    out = [round(1e3 * x, 3) for x in _acc]
    _acc[:] = [0.0] * len(FIELDS)
    return out
