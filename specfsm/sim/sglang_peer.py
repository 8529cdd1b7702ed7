"""SGLang 0.5.23's `--speculative-adaptive` ported to the simulator (`adaptive_spec_params.py`:
per-BS slots after CUDA graph padding, EMA 0.2, warmup 10, interval 5, hysteresis, steps=0
probing; steps=0 pays a K=1 verify + draft-extend every step; topk != 1 makes SGLang disable
adaptive and run the launch shape statically, `adaptive_unsupported_reason`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specfsm.fsm.table import Mode
from specfsm.model.acceptance import DraftShape
from specfsm.sim.plan import SPEC, WARM, Controller, Plan
from specfsm.sim.tune import SGLANG_DEFAULT_ADAPTIVE, sglang_spec_cuda_graph_bs


class _SGLangSlot:
    """Port of AdaptiveStepSlot (0.5.23), logging removed."""

    def __init__(self, initial_steps: int, cfg: dict[str, Any]) -> None:
        self.candidate_steps: list[int] = sorted(set(cfg["candidate_steps"]))
        self.ema_alpha = float(cfg.get("ema_alpha", 0.2))
        self.update_interval = int(cfg.get("update_interval", 5))
        self.warmup_batches = int(cfg.get("warmup_batches", 10))
        self.down_hysteresis = float(cfg.get("down_hysteresis", -0.25))
        self.up_hysteresis = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling_coeff = float(cfg.get("ceiling_coeff", 0))
        if initial_steps in self.candidate_steps:
            self.current_steps = initial_steps
        else:
            self.current_steps = self.candidate_steps[len(self.candidate_steps) // 2]
        self.ema_accept_len = float(self.current_steps - 1)
        self._batch_count = 0

    def update(self, mean_correct_drafts: float) -> bool:
        if self.current_steps > 0:
            self.ema_accept_len = (
                1 - self.ema_alpha
            ) * self.ema_accept_len + self.ema_alpha * mean_correct_drafts
        self._batch_count += 1
        if self._batch_count <= self.warmup_batches:
            return False
        if (self._batch_count - self.warmup_batches) % self.update_interval != 0:
            return False
        return self._recompute()

    def _recompute(self) -> bool:
        old = self.current_steps
        idx = self.candidate_steps.index(old)
        old_idx = idx
        if old == 0:
            idx = min(idx + 1, len(self.candidate_steps) - 1)
            target = self.candidate_steps[idx]
            if target > 0 and self.ema_accept_len < 0:
                self.ema_accept_len = float(target - 1)
            self.current_steps = target
            return target != old
        while idx > 0:
            prev = self.candidate_steps[idx - 1]
            drop = (0.5 if prev == 0 else prev - 0.5) + self.down_hysteresis
            if self.ema_accept_len <= drop:
                idx -= 1
            else:
                break
        if not idx < old_idx:
            while idx < len(self.candidate_steps) - 1:
                rise = self.candidate_steps[idx] - 0.5 + self.up_hysteresis
                if self.ema_accept_len > rise:
                    idx += 1
                else:
                    break
        target = self.candidate_steps[idx]
        if self.ceiling_coeff > 0:
            ceiling = max(1, math.ceil(self.ema_accept_len * self.ceiling_coeff))
            if ceiling < target <= old:
                while idx > 0 and self.candidate_steps[idx] > ceiling:
                    idx -= 1
                target = self.candidate_steps[idx]
        self.current_steps = target
        return target != old


class SGLangAdaptiveController(Controller):
    """SGLang 0.5.23 `--speculative-adaptive` (topk=1 chains; steps=0 keeps the draft warm).

    `shape` is the server's launch shape; `graph_bs` the server's decode CUDA-graph batch
    sizes (default SGLang 0.5.23's for `max_bs`), to which a batch is padded before its slot
    is looked up. A chain (topk=1) must have its steps among the
    config's candidate steps (SGLang raises otherwise) and is the initial steps. topk != 1:
    SGLang's `adaptive_unsupported_reason` rejects it and `_maybe_disable_adaptive` falls back
    to static parameters with a warning, so the controller speculates with `shape` always.
    """

    def __init__(
        self,
        config: dict[str, dict[str, Any]] | None = None,
        initial_steps: int | None = None,
        max_bs: int = 256,
        name: str = "sglang-adaptive",
        shape: DraftShape | None = None,
        graph_bs: Sequence[int] | None = None,
    ) -> None:
        cfg = config if config is not None else SGLANG_DEFAULT_ADAPTIVE
        self.name = name
        self.config = cfg
        self.launch_shape = shape
        self.disabled_reason: str | None = None
        if shape is not None and shape.topk != 1:
            self.disabled_reason = (
                f"speculative_eagle_topk={shape.topk} (only topk=1 is supported): "
                "static speculative params"
            )
        # per-bs slots are the digit keys; the others (ema_alpha, ...) are shared settings
        union = sorted({s for k, e in cfg.items() if k.isdigit() for s in e["candidate_steps"]})
        if shape is not None and shape.topk == 1 and initial_steps is None:
            if shape.steps not in union:
                raise ValueError(
                    f"--speculative-num-steps={shape.steps} is not in the adaptive config "
                    f"candidate_steps {union}"
                )
            initial_steps = shape.steps
        init = initial_steps if initial_steps is not None else union[len(union) // 2]
        top = {k: v for k, v in cfg.items() if not k.isdigit()}
        self._bs_list = sorted(int(k) for k in cfg if k.isdigit())
        self._slots = {
            int(k): _SGLangSlot(init, {**top, **v}) for k, v in cfg.items() if k.isdigit()
        }
        self._graph_bs = sorted(graph_bs) if graph_bs else sglang_spec_cuda_graph_bs(max_bs)
        self._shapes = {s: DraftShape.chain(s) for s in union if s > 0}

    def _route(self, bs: int) -> _SGLangSlot:
        import bisect

        i = bisect.bisect_left(self._graph_bs, bs)
        padded = self._graph_bs[i] if i < len(self._graph_bs) else bs
        j = bisect.bisect_right(self._bs_list, padded) - 1
        return self._slots[self._bs_list[max(0, j)]]

    def candidate_steps(self, bs: int) -> list[int]:
        """The draft steps SGLang may run at batch size `bs` (its slot after graph padding)."""
        return list(self._route(max(1, bs)).candidate_steps)

    def plan(
        self, it: int, bs: int, n_prefill: int, accept_lens: tuple[int, ...], mean_ctx: int = 0
    ) -> Plan:
        if self.disabled_reason is not None:
            return Plan(SPEC, Mode.SPECULATING, self.launch_shape)
        steps = self._route(max(1, bs)).current_steps
        if steps > 0:
            return Plan(SPEC, Mode.SPECULATING, self._shapes[steps])
        return Plan(WARM, Mode.PLAIN)

    def feed(self, shape: DraftShape, accept_lens_mean: float, bs: int) -> None:
        if self.disabled_reason is None:
            self._route(bs).update(accept_lens_mean - 1.0)

    def feed_steps0(self, bs: int) -> None:
        """steps=0 iterations also report (zero correct drafts) and advance the slot's counter."""
        self._route(bs).update(0.0)

    def describe(self) -> dict[str, object]:
        if self.disabled_reason is not None:
            return {"name": self.name, "adaptive": f"disabled: {self.disabled_reason}"}
        return {"name": self.name, "config": self.config}
