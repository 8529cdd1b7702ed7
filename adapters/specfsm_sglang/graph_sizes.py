"""The decode CUDA-graph batch sizes a runtime state is captured for.

SGLang's graph runners (0.5.17 and 0.5.23 alike: ``get_batch_sizes_to_capture`` in
``model_executor/runner/base_cuda_graph_runner.py``) take their sizes from the resolved
``cuda_graph_config.decode.bs``: on 0.5.17 through the model runner's ``server_args``, on 0.5.23
through the runtime context's ``exec.graph`` bag. ``build_adaptive_runtime_state``'s own
``cuda_graph_bs`` argument overrides another leaf, ``cuda_graph_bs_decode``, which no runner
reads once the server has started: a narrower list passed there alone is captured at the
server's full sizes. So a state's cap (config ``shape_graph_max_bs``) is applied here: every
decode config a runner can reach holds the narrower list while that state is built, and the
list is rebound, never changed in place (SGLang shares it between config copies).

- `server_sizes`: the sizes the server's decode graphs were captured for (None: graphs off);
- `capped`: those up to a cap;
- `captured_at`: the block inside which SGLang's runners capture at given sizes;
- `captured_max`: the largest batch size a built state's runners captured, for the log line.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from specfsm_sglang.refusal import ConfigError


def _runner(worker: Any, *path: str) -> Any:
    obj = worker
    for name in path:
        obj = getattr(obj, name, None)
    return obj


def graphs_on(worker: Any) -> bool:
    """Whether the server captured decode CUDA graphs: its target model runner holds a decode
    graph runner (the launch's own, False on the CPU bed); for a worker without that attribute,
    whether a decode config it reaches has a backend other than "disabled"."""
    tmr = _runner(worker, "_target_worker", "model_runner")
    if tmr is not None and hasattr(tmr, "decode_cuda_graph_runner"):
        return tmr.decode_cuda_graph_runner is not None
    return any(str(d.backend) != "disabled" for d in _decode_configs(worker))


def _decode_configs(worker: Any) -> list[Any]:
    """Every distinct decode ``PhaseConfig`` SGLang's graph runners of `worker` may read their
    sizes from: the runtime context's and each model runner's ``server_args``'s."""
    found: list[Any] = []
    holders: list[Any] = []
    with contextlib.suppress(ImportError, ValueError, AttributeError):
        from sglang.srt.runtime_context import get_exec

        holders.append(get_exec().graph)
    for path in (("_target_worker", "model_runner"), ("_draft_worker", "draft_runner")):
        holders.append(getattr(_runner(worker, *path), "server_args", None))
    for holder in holders:
        try:
            decode = holder.cuda_graph_config.decode
        except (AttributeError, ValueError):
            continue
        if decode is not None and all(decode is not d for d in found):
            found.append(decode)
    return found


def server_sizes(worker: Any) -> list[int] | None:
    """The decode CUDA-graph batch sizes the server captured (its launch graph runner's, else
    its decode config's), or None when graphs are off. With graphs on and no size list to be
    found, None too: `capped` refuses a cap then rather than ignore it."""
    if not graphs_on(worker):
        return None
    launch = _runner(worker, "_target_worker", "model_runner", "decode_cuda_graph_runner")
    if bs := getattr(launch, "capture_bs", None):
        return sorted({int(b) for b in bs})
    for decode in _decode_configs(worker):
        bs = getattr(decode, "bs", None)
        if bs:
            return sorted({int(b) for b in bs})
    return None


def capped(sizes: list[int] | None, max_bs: int | None, graphs: bool) -> list[int] | None:
    """The sizes an extra shape is captured for: `sizes` (`server_sizes`) up to `max_bs`
    (config shape_graph_max_bs; None: all of them). None when graphs are off (`graphs`
    False). A cap below every size, or one set while graphs are on and the server's sizes
    could not be read, refuses the start-up (ConfigError) instead of capturing at every size."""
    if max_bs is None:
        return sizes
    if sizes is None:
        if graphs:
            raise ConfigError(
                "shape_graph_max_bs",
                f"{max_bs} cannot be applied: this SGLang's decode CUDA-graph batch sizes "
                "could not be read (cuda_graph_config.decode.bs); remove the cap",
            )
        return None
    kept = [b for b in sizes if b <= max_bs]
    if not kept:
        raise ConfigError(
            "shape_graph_max_bs",
            f"{max_bs} is below every decode CUDA-graph batch size of the server "
            f"({min(sizes)} the smallest)",
        )
    return kept


@contextlib.contextmanager
def captured_at(worker: Any, sizes: list[int] | None) -> Iterator[None]:
    """Inside the block SGLang's graph runners of `worker` capture at `sizes` (None: as the
    server does); every config is given back its own list after it."""
    configs = _decode_configs(worker) if sizes else []
    saved = [d.bs for d in configs]
    for d in configs:
        d.bs = list(sizes or ())
    try:
        yield
    finally:
        for d, bs in zip(configs, saved, strict=True):
            d.bs = bs


def captured_max(state: Any) -> int | None:
    """The largest batch size any CUDA-graph runner of a built runtime state captured (None:
    no graphs)."""
    runners = ("target_graph_runner", "cuda_graph_runner", "cuda_graph_runner_for_draft_extend")
    sizes = [
        max(bs)
        for name in runners
        if (bs := getattr(getattr(state, name, None), "capture_bs", None))
    ]
    return max(sizes) if sizes else None
