"""The GPU box's wheel chunks fit a device call beside the tracked tree: the chunk size follows
the tree, a wheel larger than a chunk travels in pieces that the box's install stage joins once
the last has come, and a tree that leaves too little stops the packing with what to do."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
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


def test_the_tree_leaves_room_for_the_wheels() -> None:
    """A canary for committed results: beside the tracked tree a call must still carry 10 MiB
    of wheels (about ten install calls for the box's 95 MiB), or the results' raw tgz files
    have to leave the tree before a GPU machine's install calls are refused."""
    tree = pw.tracked_bytes()
    assert tree is not None
    assert pw.chunk_limit(tree) >= 10 * MIB, f"tree {tree / MIB:.1f} MiB in blocks"


def test_pack_first_fit(tmp_path: Path) -> None:
    sizes = {"a.whl": 6, "b.whl": 5, "c.whl": 4, "d.whl": 1}
    for name, mib in sizes.items():
        (tmp_path / name).write_bytes(b"\0" * (mib * MIB))
    chunks = pw.pack(sorted(tmp_path.glob("*.whl")), 10 * MIB)
    assert [[w.name for w in c] for c in chunks] == [["a.whl", "c.whl"], ["b.whl", "d.whl"]]


def test_a_wheel_larger_than_a_chunk_travels_in_pieces(tmp_path: Path) -> None:
    big = tmp_path / "big.whl"
    data = os.urandom(11 * MIB + 5)
    big.write_bytes(data)
    (tmp_path / "small.whl").write_bytes(b"\0" * MIB)
    chunks = pw.pack(sorted(tmp_path.glob("*.whl")), 5 * MIB)
    names = sorted(w.name for c in chunks for w in c)
    assert names == ["big.whl.part1of3", "big.whl.part2of3", "big.whl.part3of3", "small.whl"]
    assert all(sum(w.stat().st_size for w in c) <= 5 * MIB for c in chunks)
    assert not big.exists()
    pieces = sorted(tmp_path.glob("big.whl.part*"))
    assert pw.join(pieces, tmp_path / "joined.whl").read_bytes() == data
    with pytest.raises(SystemExit, match="2 of 3 pieces"):
        pw.join(pieces[:2], tmp_path / "short.whl")


def test_a_tree_that_leaves_too_little_stops_the_packing(tmp_path: Path) -> None:
    (tmp_path / "a.whl").write_bytes(b"\0" * MIB)
    with pytest.raises(SystemExit, match="shrink the tree"):
        pw.pack([tmp_path / "a.whl"], pw.PIECE_MIN - 1)


def _wheel(path: Path, module: str, body: bytes) -> Path:
    """A minimal pure-Python wheel of one module (what pip needs to install it)."""
    dist = f"{module}-1.0.dist-info"
    files = {
        f"{module}.py": body,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n".encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{dist}/RECORD", record)
    return path


def _install_call(root: Path, chunk: Path, site: Path) -> str:
    """One device call's `install` stage, carrying one chunk, on a machine whose SITE persists."""
    gpu = root / ".gpu"
    shutil.rmtree(gpu, ignore_errors=True)
    gpu.mkdir()
    shutil.copytree(chunk, gpu / chunk.name)
    env = dict(os.environ, SITE=str(site), WORK=str(root / "work"), PY=sys.executable)
    run = subprocess.run(
        ["bash", str(root / "benchmarks" / "gpu" / "run_on_device.sh"), "install"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "FAILED" not in run.stdout, run.stdout
    return run.stdout


def test_the_box_joins_a_split_wheel_once_its_last_piece_comes(tmp_path: Path) -> None:
    """The real install stage over two calls: the first carries a whole wheel and one piece of
    a split one, the second the other piece; the split wheel is installed after the second."""
    root = tmp_path / "repo"
    (root / "benchmarks" / "gpu").mkdir(parents=True)
    shutil.copy2(Path(pw.__file__).with_name("run_on_device.sh"), root / "benchmarks" / "gpu")
    staged = tmp_path / "staged"
    staged.mkdir()
    _wheel(staged / "whole_mod-1.0-py3-none-any.whl", "whole_mod", b"X = 1\n")
    padding = b"# " + os.urandom(600_000).hex().encode() + b"\n"
    big = _wheel(staged / "split_mod-1.0-py3-none-any.whl", "split_mod", b"X = 2\n" + padding)
    pieces = pw.split(big, -(-big.stat().st_size // 2))
    assert len(pieces) == 2
    c1, c2 = tmp_path / "chunk1", tmp_path / "chunk2"
    c1.mkdir()
    c2.mkdir()
    shutil.move(str(staged / "whole_mod-1.0-py3-none-any.whl"), c1)
    shutil.move(str(pieces[0]), c1)
    shutil.move(str(pieces[1]), c2)
    site = tmp_path / "site"

    out = _install_call(root, c1, site)
    assert "1 of 2 pieces here" in out
    assert (site / "whole_mod.py").is_file() and not (site / "split_mod.py").exists()

    out = _install_call(root, c2, site)
    assert "joined from 2 pieces and installed" in out
    spec = importlib.util.spec_from_file_location("split_mod", site / "split_mod.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.X == 2
    assert not any((site / ".pieces").iterdir())
