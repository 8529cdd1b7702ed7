"""Rank agreement with several real processes on gloo: DP-attention ranks with different
local batches take identical decisions on the same iteration."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import socket
from typing import Any

import pytest

WORLD = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(rank: int, port: int, seed: int, q: Any) -> None:
    import torch.distributed as dist
    from specfsm_sglang.consensus import GlobalLoad, broadcast_object, check_agreement

    from specfsm import Event, Mode, Observation, SpecFSM, ThresholdPolicy
    from specfsm.fsm.testing import capturing_log

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    group = dist.new_group(list(range(WORLD)), backend="gloo")
    rng = random.Random(seed * 100 + rank)  # every rank sees a DIFFERENT local batch
    load = GlobalLoad(group)
    log, _ = capturing_log(rank)
    fsm = SpecFSM(ThresholdPolicy(high=40, low=20, debounce=2, min_dwell=3), log=log)
    decisions = []

    def step(machine: SpecFSM, it: int, obs: Observation) -> None:
        """One iteration as the engine plays it; record the decision; ranks must agree."""
        ev = machine.step(obs)
        if machine.mode is Mode.DRAINING:
            machine.process_event(Event.DRAINED, obs)
        elif machine.mode is Mode.RESYNCING:
            machine.process_event(Event.RESYNCED, obs)
        decisions.append((it, ev.name if ev else None, machine.mode.name))
        assert check_agreement(list(Mode).index(machine.mode), group)

    for it in range(300):
        local = rng.randrange(0, 30)
        step(fsm, it, Observation(iteration=it, decode_bs=load(local), rank=rank))
    # a context-aware GoodputPolicy: batch size and KV lengths made global in one all-reduce
    from specfsm.model.acceptance import DraftShape
    from specfsm.model.costs import CostModel, load_table
    from specfsm.policy.goodput import GoodputPolicy

    table = load_table("h200_sglang0517_llama8b+h200_sglang0517_llama8b_ctx4096")
    # zero-tax PLAIN: against the measured warm PLAIN (2x a decode step) it would never switch
    model = CostModel(table, DraftShape.chain(3))
    fsm2 = SpecFSM(GoodputPolicy(model, 2.2, min_dwell=3, plain="zero-tax"), log=log)
    for it in range(300):
        local = rng.randrange(0, 12)
        local_ctx = sum(rng.randrange(256, 6000) for _ in range(local))
        bs, ctx_tokens = load.pair(local, local_ctx)
        obs = Observation(iteration=it, decode_bs=bs, mean_ctx=ctx_tokens // max(bs, 1))
        step(fsm2, 1000 + it, obs)
    # a disagreement is detected
    disagree = not check_agreement(rank, group)
    control = broadcast_object({"pin": "PLAIN"} if rank == 0 else None, group)
    q.put((rank, decisions, disagree, control))
    dist.destroy_process_group()


def test_dp_ranks_switch_on_the_same_iteration() -> None:
    """Three gloo ranks with different local loads (and, for a context-aware GoodputPolicy,
    different KV lengths) decide identically at every iteration, a real disagreement is
    detected, and rank 0's control message reaches every rank."""
    pytest.importorskip("torch")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, port, 7, q)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results = dict((r, (d, dis, c)) for r, d, dis, c in (q.get(timeout=180) for _ in procs))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    first = results[0][0]
    switches = [d for d in first if d[1] is not None]
    assert [d for d in switches if d[0] < 1000], "the load trace should make the policy switch"
    assert [d for d in switches if d[0] >= 1000], "the context-aware policy should switch too"
    for r in range(WORLD):
        assert results[r][0] == first
        assert results[r][1] is True
        assert results[r][2] == {"pin": "PLAIN"}
