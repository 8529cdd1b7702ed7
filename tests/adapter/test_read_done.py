"""The scheduler's write-after-read barrier after a PLAIN step (SGLang 0.5.17's overlap
scheduler): the read-done event the target DECODE graph recorded goes to the runner the
scheduler reads, the draft runner of a speculative worker; an event the forward did not record
never does, and an SGLang without the event is left alone."""

from __future__ import annotations

from types import SimpleNamespace

from specfsm_sglang import compat


def _worker() -> tuple[SimpleNamespace, SimpleNamespace, SimpleNamespace]:
    target = SimpleNamespace(war_fastpath_read_done_event="stale")
    draft = SimpleNamespace(war_fastpath_read_done_event=None)
    return SimpleNamespace(war_fastpath_runner=draft), target, draft


def test_the_event_the_forward_recorded_goes_to_the_runner_the_scheduler_reads() -> None:
    worker, target, draft = _worker()
    assert compat.clear_read_done(target) and target.war_fastpath_read_done_event is None
    target.war_fastpath_read_done_event = "pre-replay"  # the DECODE graph's snapshot
    compat.hand_over_read_done(worker, target)
    assert draft.war_fastpath_read_done_event == "pre-replay"
    assert target.war_fastpath_read_done_event is None


def test_a_forward_that_recorded_none_leaves_the_whole_forward_barrier() -> None:
    worker, target, draft = _worker()
    compat.clear_read_done(target)  # the stale event of an earlier step is gone
    compat.hand_over_read_done(worker, target)  # an eager forward records none
    assert draft.war_fastpath_read_done_event is None


def test_an_sglang_without_the_event_is_left_alone() -> None:
    runner = SimpleNamespace()
    assert not compat.clear_read_done(runner)
    worker = SimpleNamespace(war_fastpath_runner=runner)
    compat.hand_over_read_done(worker, runner)
    assert not hasattr(runner, compat.READ_DONE)
    target = SimpleNamespace(war_fastpath_read_done_event="x")
    compat.hand_over_read_done(SimpleNamespace(), target)  # no war_fastpath_runner
    assert target.war_fastpath_read_done_event == "x"
