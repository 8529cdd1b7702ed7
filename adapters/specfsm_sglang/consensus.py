"""Rank agreement: every TP rank and every DP-attention rank takes the same decision.

- TP ranks see the same batch (requests are broadcast from rank 0) and the same accept lengths
  (verify results are broadcast or deterministic), so a deterministic policy decides alike on
  every rank with no communication.
- Under DP attention each rank has its own batch, so the load signal is made global first: a
  CPU all-reduce (gloo) of the local decode batch size over the TP CPU group, which spans the
  DP-attention ranks; every rank then feeds the same number to the same policy and switches
  on the same decode forward (the decision takes effect inside that forward).
- Anything read from outside (the runtime control file) is read by rank 0 and broadcast.
- A measured step time is each rank's own wall clock: for a policy that learns from it (the
  goodput policy's online calibration, `uses_step_ms`) every rank is given the ranks' mean,
  in whole microseconds (one all-reduce per reported step, `StepClock`), so that their
  calibrations, and so their decisions, stay equal.
"""

from __future__ import annotations

from typing import Any

from specfsm_sglang import compat


class GlobalLoad:
    """Sum of local decode batch sizes over a process group, divided by the number of ranks
    that share each batch (attention-TP ranks hold copies of the same batch)."""

    def __init__(self, group: Any, copies_per_batch: int = 1) -> None:
        import torch

        self._torch = torch
        self._dist = torch.distributed
        self.group = group
        self.copies = max(1, copies_per_batch)
        self._buf = torch.zeros(2, dtype=torch.int64)

    def __call__(self, local_bs: int) -> int:
        return self.pair(local_bs, 0)[0]

    def pair(self, local_bs: int, local_ctx_tokens: int) -> tuple[int, int]:
        """Global (decode batch size, sum of KV lengths) in one all-reduce (a context-aware
        policy needs both; every rank runs the same policy, so every rank calls the same one)."""
        buf = self._buf
        buf[0] = local_bs
        buf[1] = local_ctx_tokens
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM, group=self.group)
        return int(buf[0]) // self.copies, int(buf[1]) // self.copies


class StepClock:
    """The mean over a process group's ranks of a step time, in whole microseconds (an integer
    sum: every rank gets the same number)."""

    def __init__(self, group: Any) -> None:
        import torch

        self._dist = torch.distributed
        self.group = group
        self.ranks = self._dist.get_world_size(group)
        self._buf = torch.zeros(1, dtype=torch.int64)

    def __call__(self, local_ms: float) -> float:
        buf = self._buf
        buf[0] = round(local_ms * 1000.0)
        self._dist.all_reduce(buf, op=self._dist.ReduceOp.SUM, group=self.group)
        return int(buf[0]) // self.ranks / 1000.0


def rank_groups(server_args: Any) -> tuple[Any, GlobalLoad | None]:
    """This rank's TP CPU group (a gloo ProcessGroup; None with one TP rank) and, under DP
    attention, the global load over it; (None, None) in a single process without SGLang's
    published parallel context."""
    tp_group: Any = None
    global_load: GlobalLoad | None = None
    try:
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        if int(par.tp_size) > 1:
            tp_group = par.tp_group.cpu_group
        if compat.dp_attention(server_args):
            global_load = GlobalLoad(tp_group, int(par.attn_tp_size))
    except Exception:  # single process without published parallel context
        pass
    return tp_group, global_load


def broadcast_object(obj: Any, group: Any, src_rank_in_group: int = 0) -> Any:
    """Rank `src` of `group` sends `obj`; every rank returns the same object."""
    import torch.distributed as dist

    box = [obj]
    src = dist.get_global_rank(group, src_rank_in_group) if group is not None else 0
    dist.broadcast_object_list(box, src=src, group=group)
    return box[0]


def check_agreement(code: int, group: Any) -> bool:
    """True when every rank of `group` holds the same integer (one all-reduce of [c, -c])."""
    import torch
    import torch.distributed as dist

    buf = torch.tensor([code, -code], dtype=torch.int64)
    dist.all_reduce(buf, op=dist.ReduceOp.MAX, group=group)
    return int(buf[0]) == -int(buf[1])
