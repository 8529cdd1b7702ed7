"""The adapter never writes a device tensor in a way that makes the host wait for the GPU.

On CUDA, a Python scalar assigned through an index (``t[idx] = 0``, ``t[5] = 7``) and a host
list moved with ``.to(device)`` (no ``non_blocking``) are synchronizing host-to-device copies:
the scheduler thread waits for every kernel already queued, so the host work it overlaps with
the forward (the next batch) runs with the GPU idle (benchmarks/gpu/sync_probe.py shows which
patterns wait; docs/serving.md has a run). The CPU test bed cannot see such a wait, so the
source is checked instead: device tensors are written with ``index_fill_`` / ``fill_`` /
tensor values, host lists travel with ``non_blocking=True``, and ``repeat_interleave`` is
given its ``output_size``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

ADAPTER = Path(__file__).resolve().parents[2] / "adapters" / "specfsm_sglang"
#: host-side Python lists the adapter indexes with scalars (not tensors)
HOST_LISTS = {"count"}


def _base_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _scalar_into_index(tree: ast.AST) -> list[int]:
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for tgt in node.targets:
                if (
                    isinstance(tgt, ast.Subscript)
                    and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, (int, float, bool))
                    and _base_name(tgt) not in HOST_LISTS
                    and not isinstance(node.value.value, str)
                ):
                    bad.append(node.lineno)
    return bad


def _blocking_to(tree: ast.AST) -> list[int]:
    """``torch.tensor(...).to(...)`` without ``non_blocking=True``."""
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "to"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Attribute)
            and node.func.value.func.attr == "tensor"
        ):
            nb = [k for k in node.keywords if k.arg == "non_blocking"]
            if not (nb and isinstance(nb[0].value, ast.Constant) and nb[0].value.value is True):
                bad.append(node.lineno)
    return bad


def _sized_on_host(tree: ast.AST) -> list[int]:
    """``repeat_interleave`` without ``output_size``: it reads the repeats back to size its
    output (a device-to-host copy that waits)."""
    bad = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "repeat_interleave"
            and not any(k.arg == "output_size" for k in node.keywords)
        ):
            bad.append(node.lineno)
    return bad


def _modules_with_torch() -> list[Path]:
    return [p for p in sorted(ADAPTER.glob("*.py")) if "torch" in p.read_text()]


@pytest.mark.parametrize(
    ("find", "fix"),
    [
        (_scalar_into_index, "use index_fill_ / fill_ on device tensors"),
        (_blocking_to, "add non_blocking=True"),
        (_sized_on_host, "give repeat_interleave its output_size"),
    ],
    ids=["scalar-through-index", "blocking-to", "repeat-interleave-size"],
)
def test_adapter_never_waits_for_the_gpu(find: Callable[[ast.AST], list[int]], fix: str) -> None:
    found = {
        p.name: lines for p in _modules_with_torch() if (lines := find(ast.parse(p.read_text())))
    }
    assert found == {}, f"{fix}: {found}"


def test_the_checks_catch_the_patterns() -> None:
    src = (
        "t[idx] = 0\nu[5] = 7\nv = torch.tensor([1]).to(dev)\ncount[r] = 0\n"
        "w = torch.repeat_interleave(a, b)\nx = torch.repeat_interleave(a, b, output_size=n)\n"
    )
    tree = ast.parse(src)
    assert _scalar_into_index(tree) == [1, 2]
    assert _blocking_to(tree) == [3]
    assert _sized_on_host(tree) == [5]
