"""The SGLang behaviour patches of the CPU test bed, as HookRegistry hooks.

Each entry of :data:`HOOKS` is (target, hook type, hook). They are registered and applied by
:func:`specfsm_cpu.enable` (from the test bed's plugin, in every SGLang process). No SGLang file is
copied or edited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.plugins.hook_registry import HookType

from specfsm_cpu import attention

# --- 1. draft backends: SGLang refuses torch_native for EAGLE drafts -----------------------

DRAFT_BACKEND_TARGET = "sglang.srt.speculative.draft_utils.DraftBackendFactory._create_backend"


def create_draft_backend_around(
    original: Callable[..., Any],
    self: Any,
    backend_name: str,
    backend_map: dict[str, Callable[[], Any]],
    error_template: str,
    stamps_children: bool = False,
) -> Any:
    """Adds a ``torch_native`` entry to ``DraftBackendFactory``'s backend map
    (``speculative/draft_utils.py:46-81``). ``stamps_children=True`` is the multi-step draft
    decode call (``create_decode_backend``, line 118-123): it gets
    :class:`attention.TorchNativeMultiStepDraftBackend`; the draft-extend call (line 150-154)
    gets a plain ``TorchNativeAttnBackend`` (DRAFT_EXTEND_V2 carries prefix/extend lengths)."""
    runner = self.draft_model_runner
    if stamps_children:

        def make() -> tuple[str, Any]:
            return "torch_native", attention.TorchNativeMultiStepDraftBackend(
                runner, self.topk, self.speculative_num_steps
            )

    else:

        def make() -> tuple[str, Any]:
            return "torch_native", TorchNativeAttnBackend(runner)

    backend_map = {**backend_map, "torch_native": make}
    return original(self, backend_name, backend_map, error_template, stamps_children)


# --- 2. target verify on torch_native ------------------------------------------------------

VERIFY_TARGET = (
    "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend.forward_extend"
)


def forward_extend_around(
    original: Callable[..., Any], self: Any, *args: Any, **kwargs: Any
) -> Any:
    """TARGET_VERIFY batches go to :func:`attention.target_verify_attention` (tree mask
    honoured); every other forward mode runs the stock ``forward_extend``
    (``torch_native_backend.py:279``)."""
    return attention.spec_forward_extend(original, self, *args, **kwargs)


# --- 3. overlap scheduling with speculative decoding on CPU ---------------------------------

OVERLAP_TARGET = "sglang.srt.arg_groups.speculative_hook._disable_overlap_schedule_for_cpu"


def keep_overlap_choice(server_args: Any) -> None:
    """REPLACE for ``_disable_overlap_schedule_for_cpu`` (``arg_groups/speculative_hook.py:66-78``,
    called from ``_handle_eagle_family``, line 1096, and line 1292), which forces
    ``disable_overlap_schedule=True`` for speculative decoding on CPU. With the torch gather
    below, ``event_loop_overlap`` runs on CPU, so the engine's own ``disable_overlap_schedule``
    decides (overlap on/off is selectable per engine)."""
    return None


# --- 4. the FutureMap row gather of overlap mode ---------------------------------------------

GATHER_TARGET = "sglang.kernels.ops.speculative.gather_spec_extras.gather_spec_extras"


def gather_spec_extras_around(
    original: Callable[..., Any],
    indices: torch.Tensor,
    topk_p_buf: torch.Tensor,
    topk_index_buf: torch.Tensor,
    output_tokens_buf: torch.Tensor,
    hidden_states_buf: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Torch version of ``gather_spec_extras``
    (``kernels/ops/speculative/gather_spec_extras.py:58-120``), whose Triton
    ``_gather_rows_kernel`` (line 10-43) has no CPU branch (``0 active drivers``
    from ``managers/overlap_utils.py:507`` in overlap mode). Same result: row ``indices[i]`` of
    each buffer, as new tensors. Non-CPU tensors go to the original."""
    if indices.device.type != "cpu":
        out: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None] = original(
            indices, topk_p_buf, topk_index_buf, output_tokens_buf, hidden_states_buf
        )
        return out
    return gather_rows(indices, topk_p_buf, topk_index_buf, output_tokens_buf, hidden_states_buf)


def gather_rows(
    indices: torch.Tensor,
    topk_p_buf: torch.Tensor,
    topk_index_buf: torch.Tensor,
    output_tokens_buf: torch.Tensor,
    hidden_states_buf: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    idx = indices.reshape(-1).to(torch.int64)
    hidden = None if hidden_states_buf is None else hidden_states_buf[idx]
    return topk_p_buf[idx], topk_index_buf[idx], output_tokens_buf[idx], hidden


HOOKS: list[tuple[str, HookType, Callable[..., Any]]] = [
    (DRAFT_BACKEND_TARGET, HookType.AROUND, create_draft_backend_around),
    (VERIFY_TARGET, HookType.AROUND, forward_extend_around),
    (OVERLAP_TARGET, HookType.REPLACE, keep_overlap_choice),
    (GATHER_TARGET, HookType.AROUND, gather_spec_extras_around),
]
