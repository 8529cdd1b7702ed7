"""Every rank gets the same step time for a policy that learns from it: the mean over the
group in whole microseconds (`consensus.StepClock`), checked on a real gloo group of two
processes with different local clocks."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("specfsm_sglang")


def _rank(rank: int, init: str, out: str) -> None:
    import torch.distributed as dist
    from specfsm_sglang.consensus import StepClock

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        clock = StepClock(dist.group.WORLD)
        got = [clock(ms) for ms in ((5.0004, 7.25, 12.0) if rank == 0 else (5.0, 7.5, 12.0011))]
        Path(out, f"r{rank}").write_text(repr(got))
    finally:
        dist.destroy_process_group()


def test_ranks_get_the_same_mean_step(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'store'}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, init, str(tmp_path))) for r in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    r0, r1 = ((tmp_path / f"r{r}").read_text() for r in (0, 1))
    assert r0 == r1 == repr([5.0, 7.375, 12.0])  # (5000 + 5000) // 2, (7250 + 7500) // 2, ...
