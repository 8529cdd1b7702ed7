"""The GPU box's wheel chunks fit a device call beside the tracked tree: the chunk size follows
the tree, and a wheel no chunk can hold stops the packing with what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))

import prepare_wheels as pw

MIB = 2**20


def test_chunk_size_follows_the_tree() -> None:
    assert pw.chunk_limit(None) == pw.CHUNK_MAX
    assert pw.chunk_limit(30 * MIB) == pw.CHUNK_MAX
    # 50 MiB of tree leave 13.5 MiB of a call's 64, the manifest's margin taken
    assert pw.chunk_limit(50 * MIB) == 64 * MIB - pw.CALL_MARGIN - 50 * MIB


def test_the_tree_leaves_room_for_the_largest_wheel() -> None:
    """A canary for committed results: the largest wheel the box needs (sglang-kernel 0.4.5,
    slimmed, 17.4 MiB) must still travel beside the tracked tree in one call, or a GPU
    machine's install calls are refused."""
    tree = pw.tracked_bytes()
    assert tree is not None
    assert pw.chunk_limit(tree) >= int(17.4 * MIB), f"tree {tree / MIB:.1f} MiB in blocks"


def test_pack_first_fit_and_a_wheel_too_large(tmp_path: Path) -> None:
    sizes = {"a.whl": 6, "b.whl": 5, "c.whl": 4, "d.whl": 1}
    for name, mib in sizes.items():
        (tmp_path / name).write_bytes(b"\0" * (mib * MIB))
    chunks = pw.pack(sorted(tmp_path.glob("*.whl")), 10 * MIB)
    assert [[w.name for w in c] for c in chunks] == [["a.whl", "c.whl"], ["b.whl", "d.whl"]]
    with pytest.raises(SystemExit, match="exceeds one chunk"):
        pw.pack(sorted(tmp_path.glob("*.whl")), 5 * MIB)
