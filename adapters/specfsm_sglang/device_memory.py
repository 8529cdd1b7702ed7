"""Free device memory, as the start-up's builds measure what they took and say what was left
when one does not fit. One reading for every build, so their sizes and refusals agree.

Adapter code: it reads torch, imported when first asked (so that importing it costs nothing).
"""

from __future__ import annotations

from typing import Any


def free_bytes(device: Any = "cuda") -> int:
    """Free memory of `device` in bytes (0 on a CPU device or without CUDA: the CPU bed)."""
    import torch

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return 0
    return int(torch.cuda.mem_get_info()[0])


def free_mib(device: Any = "cuda") -> float:
    """`free_bytes` in MiB."""
    return free_bytes(device) / 2**20
