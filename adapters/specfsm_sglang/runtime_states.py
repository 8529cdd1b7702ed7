"""The runtime states one rank's EAGLE worker switches between, all built at start-up.

- SPECULATING's K-wide state of the launch shape: SGLang's own, built at start-up and registered
  here as upstream's adaptive speculation does;
- the 1-wide state (steps=0, one verify token): DRAINING's, and PLAIN's with ``plain: "warm"``;
- one K-wide state per other configured shape (config ``shapes``) SPECULATING may RESHAPE to,
  built with SGLang's `build_adaptive_runtime_state` (draft / verify / draft-extend backends and
  CUDA graphs), its build time and device memory recorded for the config log line; every state
  built here shares SGLang's attention workspace (`compat.shared_attention_workspace`) and skips
  a draft-extend graph SGLang would capture at the launch's width and never replay
  (`compat.no_dead_draft_extend_graph`); its CUDA graphs cover the server's decode batch
  sizes up to config ``shape_graph_max_bs`` (all by default; applied by `graph_sizes`, since
  SGLang's own override of the sizes is not read by its runners); a shape of another top-k than
  the server's is built and drafted through the relay (`relay`);
- PLAIN's own decode state and lag buffer (``plain: "zero_tax"``, `plain.ZeroTaxPlain`).

A state that does not fit, or that SGLang fails to build, refuses the start-up in one line
(`ConfigError` naming the shape, or ``plain`` for DRAINING's state and PLAIN's graph, with the
free memory before it and what to change) instead of SGLang's capture traceback. Attaching a
state is the mode actions' job (`actions`).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from specfsm.model.acceptance import DraftShape
from specfsm_sglang import compat, graph_sizes, relay
from specfsm_sglang.device_memory import free_mib
from specfsm_sglang.refusal import ConfigError, out_of_memory, refuse_out_of_memory
from specfsm_sglang.schema import Config
from specfsm_sglang.server_checks import engine_shapes

if TYPE_CHECKING:
    from specfsm_sglang.plain import ZeroTaxPlain


class EngineStates:
    """Every runtime state of one worker (see the module docstring)."""

    def __init__(self, worker: Any, cfg: Config) -> None:
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        self.worker = worker
        #: the server's launch width: top-k, steps and draft tokens (the relay's width is its
        #: top-k whatever shape drafts)
        self.topk = int(worker.topk)
        self.spec_steps = int(worker.speculative_num_steps)
        self.spec_tokens = int(worker.speculative_num_draft_tokens)
        dw = worker._draft_worker
        tmr = worker._target_worker.model_runner
        # The K-wide state SGLang built at start-up, registered as upstream's adaptive does.
        self.spec_state = SpecRuntimeState(
            speculative_num_steps=self.spec_steps,
            speculative_num_draft_tokens=self.spec_tokens,
            draft_attn_backend=dw.draft_attn_backend,
            cuda_graph_runner=dw.cuda_graph_runner,
            target_attn_backend=tmr.attn_backend,
            target_graph_runner=tmr.decode_cuda_graph_runner,
            draft_extend_attn_backend=dw.draft_extend_attn_backend,
            cuda_graph_runner_for_draft_extend=dw.cuda_graph_runner_for_draft_extend,
        )
        #: the decode CUDA-graph batch sizes every state is captured for (None: graphs off)
        self.graph_bs = graph_sizes.server_sizes(worker)
        t0 = time.perf_counter()
        no_fit = (
            f"the 1-wide state DRAINING runs does not fit in device memory ({free_mib():.0f} "
            "MiB were free before building it): lower --mem-fraction-static"
        )
        with (
            refuse_out_of_memory("plain", no_fit),
            compat.shared_attention_workspace(worker),
        ):
            # at the server's own sizes: SGLang's override left unset as at launch
            self.plain_state = worker.build_adaptive_runtime_state(
                speculative_num_steps=0, speculative_num_draft_tokens=1
            )
        self.build_plain_s = time.perf_counter() - t0
        #: the draft shape SGLang launched with, and every shape SPECULATING may RESHAPE to,
        #: each with its pre-built runtime state (the launch shape's is SGLang's own)
        self.launch_shape = DraftShape(self.topk, self.spec_steps, self.spec_tokens)
        self.shape_states: dict[DraftShape, Any] = {self.launch_shape: self.spec_state}
        #: per shape: build seconds and device bytes (0 on CPU), for the config log line
        self.shape_builds: dict[str, dict[str, float]] = {}
        shapes = engine_shapes(cfg, self.launch_shape)[1:]
        narrower = any(s.topk != self.topk for s in shapes)
        if narrower and (miss := relay.missing_methods(worker)):
            raise ConfigError(
                "shapes",
                f"shapes of another top-k than the server's need the draft worker's {miss}, "
                f"which this SGLang ({compat.sglang_version()}) lacks",
            )
        #: the decode CUDA-graph batch sizes the extra shapes are captured for (config
        #: shape_graph_max_bs; None: graphs off)
        self.shape_graph_max_bs = cfg.shape_graph_max_bs
        self.shape_graph_bs = graph_sizes.capped(
            self.graph_bs, cfg.shape_graph_max_bs, graph_sizes.graphs_on(worker)
        )
        if self.graph_bs and self.shape_graph_bs and shapes:
            # the extra shapes' graphs may need more rows in SGLang's shared logits buffer
            rows = max(
                max(self.graph_bs) * self.spec_tokens,
                max(self.shape_graph_bs) * max(s.draft_tokens for s in shapes),
            )
            compat.grow_graph_logits(worker, rows)
        for shape in shapes:
            self.shape_states[shape] = self._build_shape_state(shape)
        if narrower:
            # the relay stays K wide whatever shape drafts (specfsm_sglang.relay)
            relay.install(worker, self.topk)
        #: whether SGLang's prefill tail-token write was replaced by a sync-free one (0.5.17)
        self.sync_free_tail = compat.sync_free_prefill_tail()
        #: PLAIN's own decode state and lag buffer (config plain="zero_tax"), or None (warm)
        self.zero_tax: ZeroTaxPlain | None = (
            self._build_zero_tax(cfg) if cfg.plain == "zero_tax" else None
        )

    def _build_zero_tax(self, cfg: Config) -> ZeroTaxPlain:
        """PLAIN's decode state and lag buffer, built last; a graph that does not fit in what
        the states before it left refuses the start-up with those states' sizes (ConfigError)."""
        from specfsm_sglang.plain import ZeroTaxPlain

        no_fit = (
            f"zero-tax PLAIN's target decode graph does not fit in device memory "
            f"({free_mib():.0f} MiB were free before building it; extra shapes' states: "
            f"{self.shape_builds or 'none'}): lower --mem-fraction-static, drop "
            'shapes or cap their graphs (shape_graph_max_bs), or set plain "warm"'
        )
        with refuse_out_of_memory("plain", no_fit):
            return ZeroTaxPlain(
                self.worker, cfg.lag_tokens, cfg.catchup_tokens, cfg.defer_prefill_tokens
            )

    def _build_shape_state(self, shape: DraftShape) -> Any:
        """SGLang's runtime state for `shape` (draft / verify / draft-extend backends and CUDA
        graphs, `build_adaptive_runtime_state`), its time and device memory recorded; a shape
        that does not fit refuses the start-up with the reason (ConfigError)."""
        free0 = free_mib()
        t0 = time.perf_counter()
        try:
            with (
                relay.build_topk(self.worker, shape.topk, self.topk),
                compat.shared_attention_workspace(self.worker),
                compat.no_dead_draft_extend_graph(shape.draft_tokens, self.spec_tokens),
                graph_sizes.captured_at(self.worker, self.shape_graph_bs),
            ):
                state = self.worker.build_adaptive_runtime_state(
                    speculative_num_steps=shape.steps,
                    speculative_num_draft_tokens=shape.draft_tokens,
                )
        except Exception as exc:
            if out_of_memory(exc):
                raise ConfigError(
                    "shapes",
                    f"the runtime state of {shape.label()} does not fit in device memory "
                    f"({free0:.0f} MiB were free before building it; states built so "
                    f"far: {self.shape_builds}): drop shapes, cap their graphs "
                    "(shape_graph_max_bs) or lower --mem-fraction-static "
                    f"({str(exc)[:300]})",
                ) from None
            # e.g. a graph capture SGLang sized for the launch shape only: refuse in one line
            # naming the shape instead of a scheduler traceback
            raise ConfigError(
                "shapes",
                f"building the runtime state of {shape.label()} failed: "
                f"{type(exc).__name__}: {exc}"[:600],
            ) from exc
        used = free0 - free_mib() if free0 else 0.0
        graph_max = graph_sizes.captured_max(state)
        cap = self.shape_graph_max_bs
        if cap is not None and graph_max is not None and graph_max > cap:
            raise ConfigError(
                "shape_graph_max_bs",
                f"{cap} was not applied: SGLang captured the runtime state of {shape.label()} "
                f"up to batch size {graph_max}; remove the cap",
            )
        self.shape_builds[shape.label()] = {
            "build_s": round(time.perf_counter() - t0, 3),
            "device_mib": round(used, 1),
            **({"graph_max_bs": graph_max} if graph_max is not None else {}),
        }
        return state

    def describe(self) -> dict[str, object]:
        """The states' part of the controller's config log line."""
        zt = self.zero_tax
        return {
            **(
                zt.describe()
                if zt is not None
                else {"plain": "warm (steps=0: 1-token verify + 1-token draft-extend)"}
            ),
            "build_plain_state_s": round(self.build_plain_s, 3),
            "sync_free_prefill_tail": self.sync_free_tail,
            "shape_states": {"launch": self.launch_shape.label(), **self.shape_builds},
            "shape_graph_max_bs": self.shape_graph_max_bs,
            # the sizes the extra shapes were captured for (None: graphs off)
            "shape_graph_bs": self.shape_graph_bs,
        }

    def topk_of(self, state: Any) -> int:
        """The top-k `state` drafts and verifies with: its shape's (the launch top-k for the
        launch and the 1-wide states)."""
        for shape, st in self.shape_states.items():
            if st is state:
                return shape.topk
        return self.topk
