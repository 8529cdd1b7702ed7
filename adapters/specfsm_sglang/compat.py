"""Everything specfsm knows about SGLang's internals, in one version-aware place.

Hook targets (dotted paths for `HookRegistry`), the field names the adapter reads, and the
server-arg checks. A new SGLang version gets a new entry in `SURFACES` once its surface data
(scripts/sglang_surfaces.py) show every target with the parameters the hooks read; 0.5.17 (the
newest release whose torch pin matches the H200 box's torch 2.11) was checked on the H200 by the
acceptance suite (benchmarks/gpu/specfsm_suite.py, docs/gpu.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Surface:
    """Hook targets and facts of one SGLang version."""

    worker: str = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
    scheduler: str = "sglang.srt.managers.scheduler.Scheduler"
    #: AFTER, in the engine's (or HTTP server's) parent process: runs after the server
    #: arguments were resolved and before any scheduler process is spawned
    launch_check: str = "sglang.srt.server_args.ServerArgs.check_server_args"
    #: run end to end (engine tests / the GPU suite), not only measured from the wheel
    verified: bool = True

    @property
    def worker_init_graphs(self) -> str:  # AFTER: build the per-mode runtime states
        return f"{self.worker}.init_cuda_graphs"

    @property
    def worker_forward(self) -> str:  # AROUND: decide, apply, check, forward
        return f"{self.worker}.forward_batch_generation"

    @property
    def worker_trivial_verify(self) -> str:  # AFTER: int64 candidates for 1-wide verifies
        # Same signature (self, batch) -> EagleVerifyInput in both versions (0.5.17:
        # eagle_worker_v2.py:1200, 0.5.23: :1678). Its draft_token is the previous round's
        # bonus_tokens, int32 after every verify in both (eagle_worker_common.py: 0.5.17 :614,
        # 0.5.23 :756 and the fused-commit path kernels/ops/speculative/eagle.py:172), while
        # verify_tree_greedy on CUDA takes int64 candidates only (sgl_kernel 0.4.5 AOT op;
        # 0.5.23's JIT op, kernels/jit/csrc/speculative/tree.cuh).
        return f"{self.worker}._build_trivial_verify_input"

    @property
    def worker_verify_complete(self) -> str:  # AFTER: accept lengths (one batch late)
        return f"{self.worker}.on_verify_complete_cpu"

    @property
    def scheduler_init(self) -> str:  # BEFORE: refuse unsupported configurations
        return f"{self.scheduler}.__init__"

    @property
    def scheduler_next_batch(self) -> str:  # AFTER: running / queued counts
        return f"{self.scheduler}.get_next_batch_to_run"

    @property
    def scheduler_process_result(self) -> str:  # AFTER: completion (DRAINED under overlap)
        return f"{self.scheduler}.process_batch_result"

    @property
    def scheduler_idle(self) -> str:  # AFTER: SGLang's own pool-leak check ran
        return f"{self.scheduler}.on_idle"

    @property
    def resolve_spec_tokens(self) -> str:  # AROUND: 1-wide rounds are not verify rounds
        return (
            "sglang.srt.managers.scheduler_components.batch_result_processor."
            "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"
        )

    @property
    def tokenizer_spec_metrics(self) -> str:  # AFTER: accept length over K-wide rounds only
        return (
            "sglang.srt.managers.tokenizer_manager.TokenizerManager."
            "_calculate_spec_decoding_metrics"
        )

    @property
    def batch_retract(self) -> str:  # AFTER (the test bed's test channel): retracted requests
        return "sglang.srt.managers.schedule_batch.ScheduleBatch.retract_decode"


def hook_targets(s: Surface) -> dict[str, str]:
    """Every dotted hook target of `s`, by its attribute name (what the surface data measure,
    scripts/sglang_surfaces.py)."""
    names = [n for n in dir(Surface) if isinstance(getattr(Surface, n), property)]
    return {"launch_check": s.launch_check, **{n: getattr(s, n) for n in sorted(names)}}


#: The leading parameters each hook reads by position (hooks.py; the test bed's test channel for
#: batch_retract); any later ones pass through ``*args, **kwargs``. A release is compatible when
#: every target exists and its signature starts with these (the surface data,
#: adapters/specfsm_sglang/surfaces/, measured by scripts/sglang_surfaces.py).
HOOK_PARAMS: dict[str, tuple[str, ...]] = {
    "launch_check": ("self",),
    "worker_init_graphs": ("self",),
    "worker_forward": ("self", "batch"),
    "worker_trivial_verify": ("self",),
    "worker_verify_complete": ("self", "num_correct_drafts_per_req"),
    "scheduler_init": ("self", "server_args"),
    "scheduler_next_batch": ("self",),
    "scheduler_process_result": ("self", "batch", "result"),
    "scheduler_idle": ("self",),
    "resolve_spec_tokens": ("self", "result", "batch"),
    "tokenizer_spec_metrics": ("self", "meta_info", "recv_obj", "i"),
    "batch_retract": ("self",),
}

#: The SGLang releases specfsm runs on, one place: 0.5.17 to 0.5.23, every release between them
#: included. Each one's hook targets exist with the parameters `HOOK_PARAMS` reads, measured
#: from its wheel (adapters/specfsm_sglang/surfaces/<version>.json, checked by
#: tests/adapter/test_surface_data.py). Run end to end: 0.5.23 (the CPU test bed) and 0.5.17
#: (the H200 acceptance suite, docs/gpu.md); the releases between are measured statically only
#: (`verified=False`). Any other version is refused at launch.
SURFACES: dict[str, Surface] = {
    "0.5.23": Surface(),
    "0.5.22": Surface(verified=False),
    "0.5.21": Surface(verified=False),
    "0.5.20": Surface(verified=False),
    "0.5.19": Surface(verified=False),
    "0.5.18": Surface(verified=False),
    # verified on the H200 on 2026-11-30: every hook target resolved and ran, CUDA graphs on
    # (benchmarks/gpu/results/2026-11-30_specfsm)
    "0.5.17": Surface(),
}
SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3")


def sglang_version() -> str:
    from importlib.metadata import version

    return version("sglang")


def surface() -> Surface:
    """The hook surface of the installed SGLang, or a clear error."""
    v = sglang_version()
    if v not in SURFACES:
        raise RuntimeError(
            f"specfsm supports sglang {', '.join(SURFACES)}; found {v}. Hook targets and field "
            "names differ between versions (see docs/sglang.md, 'Upgrading')."
        )
    return SURFACES[v]


def surface_or_newest() -> Surface:
    """The installed SGLang's surface, else the newest known one: for the hooks that must be in
    place even on an unsupported version so that they can refuse (launch check, refusal)."""
    return SURFACES.get(sglang_version(), SURFACES[next(iter(SURFACES))])


def unsupported_reason(server_args: Any) -> str | None:
    """Why specfsm refuses this server configuration at startup, or None."""
    algo = (getattr(server_args, "speculative_algorithm", None) or "").upper()
    if algo == "NEXTN":
        algo = "EAGLE"
    if algo not in SUPPORTED_ALGORITHMS:
        return (
            f"speculative_algorithm={algo or None}: specfsm drives EAGLE / EAGLE3 "
            f"(supported: {', '.join(SUPPORTED_ALGORITHMS)})"
        )
    checks = [
        (
            "speculative_adaptive",
            "SGLang's own --speculative-adaptive also swaps the runtime "
            "state; run one controller, not two",
        ),
        ("enable_multi_layer_eagle", "multi-layer EAGLE has no steps=0 runtime state"),
        ("enable_two_batch_overlap", "two-batch overlap is untested with mode switches"),
        ("enable_pdmux", "pdmux is untested with mode switches"),
    ]
    for field, why in checks:
        if getattr(server_args, field, False):
            return f"{field}=True: {why}"
    if int(getattr(server_args, "pp_size", 1) or 1) > 1:
        return "pp_size > 1: the PP tail-draft relays K-wide chains between stages"
    if (getattr(server_args, "disaggregation_mode", "null") or "null") != "null":
        return "PD disaggregation: the decode side's spec state arrives from the prefill side"
    return None


def zero_tax_unsupported(server_args: Any) -> str | None:
    """Why zero-tax PLAIN (config ``plain: "zero_tax"``) cannot run with these server
    arguments, or None. Each reason names the way out (``"plain": "warm"``)."""
    checks = [
        (
            "enable_mixed_chunk",
            "mixed chunks decode running requests inside prefill batches, which the lag "
            "buffer does not record",
        ),
        (
            "speculative_use_rejection_sampling",
            "the catch-up proposes greedy/top-k drafts, not rejection-sampling draft probs",
        ),
        (
            "enable_dp_attention",
            "DP-attention idle batches have no zero-tax path yet",
        ),
    ]
    for field, why in checks:
        if getattr(server_args, field, False):
            return f'{field}=True with "plain": "zero_tax": {why}; use "plain": "warm"'
    return None


def is_decode_forward(batch: Any) -> bool:
    """True for a decode (or DP-idle) forward: the only forwards whose width specfsm sets."""
    mode = batch.forward_mode
    return not (mode.is_extend() or getattr(batch, "is_extend_in_batch", False))


def req_pool_idx(req: Any) -> int | None:
    """A request's req_to_token row, or None before it has one: ``req.kv.req_pool_idx``
    (0.5.23), ``req.req_pool_idx`` (0.5.17)."""
    kv = getattr(req, "kv", None)
    idx = getattr(kv, "req_pool_idx", None) if kv is not None else None
    if idx is None:
        idx = getattr(req, "req_pool_idx", None)
    return None if idx is None else int(idx)


def local_batch_size(batch: Any) -> int:
    return int(batch.seq_lens.shape[0]) if batch.seq_lens is not None else 0


def extend_tokens(batch: Any) -> int:
    """The prompt tokens a prefill (extend) batch carries: ``extend_num_tokens`` (host-side,
    set when the batch is built), 0 when SGLang does not give it."""
    n = getattr(batch, "extend_num_tokens", None)
    return int(n) if n is not None else 0


def context_tokens(batch: Any) -> int:
    """Sum of the decode requests' KV lengths, from host-side data only (no device sync):
    ``seq_lens_sum`` when SGLang has it (an int; it is None in decode, recomputed lazily), else
    ``seq_lens_cpu`` (a CPU tensor on ``ScheduleBatch`` / ``ModelWorkerBatch``); 0 when neither
    is there (the policy then prices at its configured context)."""
    total = getattr(batch, "seq_lens_sum", None)
    if total is not None:
        return int(total)
    cpu = getattr(batch, "seq_lens_cpu", None)
    if cpu is not None and getattr(getattr(cpu, "device", None), "type", None) == "cpu":
        return int(cpu.sum())
    return 0


def metrics_labels(scheduler: Any) -> dict[str, str] | None:
    """SGLang's scheduler metric labels, when this rank exports SGLang's scheduler series.

    ``Scheduler.metrics_collector_context`` (set in ``Scheduler.__init__`` by
    ``SchedulerMetricsCollector.init_new``, observability/metrics_collector.py): its
    ``collector.labels`` are {model_name, engine_type, tp_rank, pp_rank, moe_ep_rank} plus
    dp_rank (DP on), priority (priority scheduling) and --extra-metric-labels; its
    ``current_scheduler_metrics_enabled`` is True on the stats-logging rank (attn_tp_rank 0,
    attn_cp_rank 0) or on every rank with --enable-metrics-for-all-schedulers. None when
    metrics are off or this rank exports nothing.
    """
    ctx = getattr(scheduler, "metrics_collector_context", None)
    collector = getattr(ctx, "collector", None)
    if collector is None or not getattr(ctx, "current_scheduler_metrics_enabled", False):
        return None
    return {str(k): str(v) for k, v in collector.labels.items()}


def dp_attention(server_args: Any) -> bool:
    return bool(getattr(server_args, "enable_dp_attention", False))


def tp_rank() -> int:
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().tp_rank)
    except Exception:
        return 0


def grow_graph_logits(worker: Any, rows: int) -> int:
    """Make SGLang's process-wide CUDA-graph logits buffer (``GraphSharedOutput``, sized at
    start-up for the launch shape: max graph bs x its draft tokens) hold `rows` rows, so that
    runtime states of wider shapes can capture their verify and draft-extend graphs. Graphs
    already captured keep the buffer they captured (they hold its tensors); only runners that
    still point at the old object get the new one. Returns the new row count, 0 when nothing
    had to change (no graphs, or already large enough). Same class in 0.5.17 and 0.5.23."""
    runners = [worker._target_worker.model_runner, worker._draft_worker.draft_runner]
    shared = getattr(runners[0], "graph_shared_output", None)
    if shared is None or int(shared.max_rows) >= rows:
        return 0
    cls = type(shared)
    grown = cls(device=shared.device, max_rows=rows)
    if getattr(cls, "_process_shared", None) is shared:
        cls._process_shared = grown
    for r in runners:
        if getattr(r, "graph_shared_output", None) is shared:
            r.graph_shared_output = grown
    return rows


@contextlib.contextmanager
def shared_attention_workspace(worker: Any) -> Iterator[None]:
    """While a runtime state is built (`build_adaptive_runtime_state`), its target attention
    backend takes SGLang's process-wide attention workspace instead of a new one: SGLang asks
    for a new workspace there (``init_new_workspace=True``, 2 GiB per state with flashinfer on
    the H200, `SGLANG_FLASHINFER_WORKSPACE_SIZE`), while its own draft and verify backends share
    the process-wide one within every step. A state's forwards never run beside another
    state's on the worker's stream, so the scratch space is never used by two at once.
    Only this worker's target model runner is changed, and only inside the block."""
    tmr = worker._target_worker.model_runner
    name = "_get_attention_backend"
    own = vars(tmr).get(name)  # an instance attribute already there is put back as it was
    orig = getattr(tmr, name)

    def shared(init_new_workspace: bool = False) -> Any:
        return orig(init_new_workspace=False)

    setattr(tmr, name, shared)
    try:
        yield
    finally:
        if own is not None:
            setattr(tmr, name, own)
        else:
            delattr(tmr, name)


def launch_width_draft_extend() -> bool:
    """Whether this SGLang sizes every runtime state's draft-extend CUDA graph at the launch's
    draft tokens: its width resolver reads the server arguments (0.5.17,
    ``spec_utils.resolve_num_tokens_per_req(server_args=...)``), which
    `build_adaptive_runtime_state` does not override, where later versions read the
    overridden spec bag (0.5.23)."""
    import inspect

    try:
        from sglang.srt.speculative import spec_utils
    except ImportError:  # no EAGLE worker can run here either
        return False
    fn = getattr(spec_utils, "resolve_num_tokens_per_req", None)
    return fn is not None and "server_args" in inspect.signature(fn).parameters


def no_dead_draft_extend_graph(draft_tokens: int, launch_draft_tokens: int) -> Any:
    """While a state of `draft_tokens` is built, skip its draft-extend CUDA graph where SGLang
    would capture it at the launch's width (`launch_width_draft_extend`): the runner refuses
    every replay of another width (``can_run_graph``) and runs the draft extend eagerly, so
    the graph (about 2.2 GiB per state for an 8B model, graphs bs 1-256, on the H200) is never
    replayed. Without it the draft extend runs eagerly as before; the memory is saved. A
    context manager (a null one where nothing is skipped)."""
    if draft_tokens == launch_draft_tokens or not launch_width_draft_extend():
        return contextlib.nullcontext()
    from sglang.srt.environ import envs

    return envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.override(True)


def sync_free_prefill_tail(module: Any = None) -> bool:
    """Make the EAGLE worker's prefill tail tokens sync-free where this SGLang's are not.

    ``_eagle_prefill_tail_tokens`` (the draft prefill's input at a chunk's last position) writes
    the next prompt token of a chunked request with ``tail[i] = token`` in 0.5.17: a Python
    scalar assigned through an index is a pageable host-to-device copy, so the scheduler waits
    for the target prefill before it plans the next batch (benchmarks/gpu/sync_probe.py; on the
    H200 ~0.5 such waits per prefill iteration of a prefill-bound trace, each as long as the
    prefill). 0.5.23 writes it with ``fill_``, which keeps the scalar a kernel argument; the
    same write is installed here when the installed function still assigns. Same values, every
    mode. Returns whether the sync-free write is in place (installed now or before).
    ``module``: where the worker looks the function up (default SGLang's eagle_worker_v2)."""
    import inspect

    if module is None:
        import importlib

        module = importlib.import_module("sglang.srt.speculative.eagle_worker_v2")
    orig = getattr(module, "_eagle_prefill_tail_tokens", None)
    if orig is None:
        return False
    if getattr(orig, "_specfsm_sync_free", False):
        return True
    try:
        src = inspect.getsource(orig)
    except (OSError, TypeError):
        return False
    if "tail_tokens[i] = next_prompt_token" not in src:
        return False

    def tail_tokens(batch: Any, next_token_ids: Any) -> Any:
        tail = next_token_ids.to(batch.input_ids.dtype)
        nxt = batch.chunked_req_next_prompt_token
        if nxt is not None:
            for i, r in enumerate(batch.reqs):
                if r is batch.chunked_req:
                    tail = tail.clone()
                    tail[i : i + 1].fill_(nxt)
                    break
        return tail

    tail_tokens._specfsm_sync_free = True  # type: ignore[attr-defined]
    tail_tokens.__wrapped__ = orig  # type: ignore[attr-defined]
    module._eagle_prefill_tail_tokens = tail_tokens
    return True


#: SGLang 0.5.17's overlap scheduler: the event a forward records once it has read the shared
#: buffers (req_to_token, SWA); absent in 0.5.23
READ_DONE = "war_fastpath_read_done_event"


def clear_read_done(model_runner: Any) -> bool:
    """Forget ``model_runner``'s read-done event before a forward, so one found after it was
    recorded by that forward; False where this SGLang has no such event."""
    if not hasattr(model_runner, READ_DONE):
        return False
    setattr(model_runner, READ_DONE, None)
    return True


def hand_over_read_done(worker: Any, model_runner: Any) -> None:
    """Give the scheduler the read-done event ``model_runner``'s forward just recorded.

    After each launch SGLang 0.5.17's scheduler orders its own stream (the next batch's
    preparation, the last batch's result processing) behind the read-done event of
    ``worker.war_fastpath_runner``, else behind the whole forward; each forward starts after
    that stream's work. A speculative worker's runner is the draft's, whose draft-extend
    records the event; a PLAIN step runs no draft-extend, but its target DECODE graph records
    one on the target runner at the pre-replay snapshot, as it does on a server without a
    draft. Handed over, the next batch's preparation overlaps the PLAIN step's replay as it
    does on that server, instead of queueing between two forwards."""
    ev = getattr(model_runner, READ_DONE, None)
    runner = getattr(worker, "war_fastpath_runner", None)
    if ev is None or runner is None or runner is model_runner:
        return
    setattr(model_runner, READ_DONE, None)
    setattr(runner, READ_DONE, ev)
