#!/usr/bin/env python3
"""Download, slim and pack the wheels that let SGLang 0.5.17 run on an offline H200 box.

Run HERE (a machine that reaches PyPI). The target box has Python 3.12, torch 2.11.0+cu130,
triton 3.6.0, numpy, aiohttp, requests, huggingface-hub, ... already (see docs/gpu.md); only what
it lacks is fetched, each pinned, for Python 3.12 manylinux x86_64, with --no-deps.

Slimming (reproducible: same input wheel -> same output bytes; entries keep their order and
timestamps, RECORD is rewritten without the dropped files):
- sglang-kernel 0.4.5: drops ``sgl_kernel/flash_ops.abi3.so`` (the FA3 library, 1.1 GB unpacked,
  loaded only by the ``fa3`` attention backend: launch with ``--attention-backend triton`` or
  ``flashinfer``), ``sgl_kernel/sm100/`` (Blackwell build; the H200 is sm90 and loads
  ``sgl_kernel/sm90/``) and ``infllm_ops`` (InfLLM-v2 sparse attention, lazily loaded, MiniCPM).
- xgrammar 0.2.1: drops ``xgrammar/lib/libxgrammar.a`` (static library for C++ builds; Python uses
  ``libxgrammar_bindings.so``).
- sglang 0.5.17: drops ``sglang/srt/server/_core.*.so`` (the embedded Rust server, 13 MiB
  unpacked, imported only when ``SGLANG_RUST_SERVER`` is set; ``python -m
  sglang.launch_server`` without it never loads it).

Packing: wheels go into ``.gpu/chunk1``, ``.gpu/chunk2``, ... (``.gpu/`` is git-ignored), first-fit
by size, each small enough to travel with the working tree under the 64 MiB per-call transfer
limit (one call per chunk with ``install``). A wheel larger than a chunk (the tree has grown)
travels in pieces, ``NAME.whl.part1of3`` and so on, placed like wheels; ``run_on_device.sh
install`` keeps the pieces on the machine until the last has come, then joins and installs the
wheel. ``.gpu/manifest.txt`` lists name, size and sha256 of every packed wheel and piece. Usage::

    python3 benchmarks/gpu/prepare_wheels.py            # -> .gpu/chunk*/ + .gpu/manifest.txt
    python3 benchmarks/gpu/prepare_wheels.py --check    # verify the packed chunks only
    python3 benchmarks/gpu/prepare_wheels.py --repack   # re-split the packed wheels (no download)
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / ".gpu"
CACHE = GPU_DIR / "download"
# a device call moves at most 64 MiB: the tracked working tree (counted in 4 KiB blocks, 42.1
# MiB on 2026-12-06 with the committed GPU results, and growing), the manifest and one chunk
CALL_LIMIT = 64 * 2**20
CALL_MARGIN = 2**19  # the manifest, and each wheel rounded up to whole blocks
# wheel bytes per chunk at most; fewer where the tree leaves less (chunk_limit); a wheel over
# the limit travels in pieces (the largest, sglang_kernel's slimmed, is 17.4 MiB)
CHUNK_MAX = 20 * 2**20
#: a call that carries less than this beside the tree is not worth its start-up
PIECE_MIN = 4 * 2**20
#: a piece of a split wheel: ``NAME.whl.partIofN``
PIECE = re.compile(r"(?P<name>.+\.whl)\.part(?P<i>\d+)of(?P<n>\d+)")

# The engine and its GPU pieces (pins from sglang 0.5.17's metadata: torch==2.11.0,
# sglang-kernel==0.4.5, flashinfer_python==0.6.15.post1, apache-tvm-ffi==0.1.11, xgrammar==0.2.1,
# transformers==5.12.1 (which wants tokenizers<=0.23.0, the box has 0.23.2), sgl-deep-gemm).
CORE = [
    "sglang==0.5.17",
    "sglang-kernel==0.4.5",
    "flashinfer-python==0.6.15.post1",
    "apache-tvm-ffi==0.1.11",
    "xgrammar==0.2.1",
    "transformers==5.12.1",
    "tokenizers==0.22.2",
    # dsa_backend.py does `import deep_gemm` on CUDA, and eagle_worker_v2.py imports dsa_backend
    # while capturing the draft CUDA graphs: without it EAGLE-3 fails at start (seen on the H200).
    "sgl-deep-gemm==0.1.5.post1",
]
# Imported while sglang.launch_server / Engine / bench_one_batch / scheduler / EAGLE worker load,
# and not on the box. Found by importing those modules in a clean Python 3.12 venv and adding
# each missing module in turn (docs/gpu.md). Versions: the ones that imported together there;
# openai is sglang's own pin.
SMALL = [
    "annotated-types==0.8.0",
    "asttokens==3.0.2",
    "compressed-tensors==0.20.1",
    "decorator==5.3.1",
    "dill==0.4.1",
    "distro==1.9.0",
    "executing==2.3.0",
    "fastapi==0.165.0",
    "gguf==0.19.0",
    "ipython==9.18.1",
    "ipython-pygments-lexers==1.1.1",
    "jedi==0.20.1",
    "jiter==0.19.0",
    "loguru==0.7.3",
    "matplotlib-inline==0.2.2",
    "msgspec==0.22.0",
    "openai==2.6.1",
    "opentelemetry-api==1.45.2",
    "orjson==3.13.0",
    "parso==0.8.7",
    "partial-json-parser==0.2.1.1.post7",
    "pexpect==4.9.0",
    "prompt-toolkit==3.0.53",
    "ptyprocess==0.7.0",
    "pure-eval==0.2.4",
    "pybase64==1.5.1",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "python-multipart==0.0.34",
    "pyzmq==27.3.0",
    "setproctitle==1.3.8",
    "sniffio==1.3.1",
    "stack-data==0.6.3",
    "starlette==1.10.0",
    "traitlets==5.16.1",
    "typing-inspection==0.4.5",
    "uvicorn==0.54.0",
    "wcwidth==0.9.4",
    # the HTTP server (sglang.launch_server -> entrypoints/openai/serving_chat.py) imports
    # jsonschema; the Engine alone does not (found when the serving benchmark first ran there)
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    # specfsm's own dependencies (pure Python; attrs and prometheus_client are on the box). The
    # specfsm code itself is not packed: run_on_device.sh's specfsm stage runs it from the
    # carried working tree, so every call runs the code as it is now.
    "six==1.17.0",
    "structlog==26.1.0",
    "transitions==0.9.3",
]
PLATFORMS = [
    "manylinux_2_34_x86_64",  # sglang 0.5.17 itself is cp312-manylinux_2_34 (compiled modules)
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
SLIM = {
    "sglang_kernel": (
        "sgl_kernel/flash_ops.abi3.so",
        "sgl_kernel/sm100/",
        "sgl_kernel/infllm_ops.",
    ),
    "xgrammar": ("xgrammar/lib/libxgrammar.a",),
    # the embedded Rust server, imported only under SGLANG_RUST_SERVER (managers/rust_server.py)
    "sglang": ("sglang/srt/server/_core.",),
}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(specs: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "--disable-pip-version-check",
        "-d",
        str(dest),
    ]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    print(f"[prepare] pip download {len(specs)} wheels into {dest}", flush=True)
    subprocess.run(cmd + specs, check=True)


def slim_wheel(src: Path, dst: Path, drop: tuple[str, ...]) -> tuple[int, int]:
    """Copy ``src`` to ``dst`` without entries starting with any of ``drop``; fix RECORD."""
    dropped = 0
    kept = 0
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        for info in zin.infolist():
            if info.filename.startswith(drop):
                dropped += info.file_size
                continue
            data = zin.read(info.filename)
            if info.filename == record_name:
                rows = [r for r in csv.reader(data.decode().splitlines()) if r]
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows(
                    r for r in rows if not r[0].startswith(drop)
                )
                data = buf.getvalue().encode()
            out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            out.external_attr = info.external_attr
            out.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(out, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
            kept += 1
    return dropped, kept


def verify_record(whl: Path) -> None:
    """Every file listed in RECORD is present with its hash (what pip relies on)."""
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        for row in csv.reader(z.read(record).decode().splitlines()):
            if len(row) != 3 or not row[1]:
                continue
            name, digest, _ = row
            if name not in names:
                raise SystemExit(f"{whl.name}: RECORD lists missing {name}")
            algo, _, want = digest.partition("=")
            got = base64.urlsafe_b64encode(hashlib.new(algo, z.read(name)).digest()).rstrip(b"=")
            if got.decode() != want:
                raise SystemExit(f"{whl.name}: hash mismatch for {name}")


def chunk_limit(tree: int | None) -> int:
    """Wheel bytes per chunk: ``CHUNK_MAX``, or what the tracked tree (``tracked_bytes``)
    leaves of a call's 64 MiB, whichever is less."""
    if tree is None:
        return CHUNK_MAX
    return min(CHUNK_MAX, CALL_LIMIT - CALL_MARGIN - tree)


def split(whl: Path, limit: int) -> list[Path]:
    """``whl`` in pieces of at most ``limit`` bytes beside it (``NAME.part1ofN``, ...), the
    wheel itself removed; ``join`` puts them back together byte for byte."""
    size = whl.stat().st_size
    n = -(-size // limit)
    data = whl.read_bytes()
    step = -(-size // n)  # even pieces, each within the limit
    pieces = []
    for i in range(n):
        piece = whl.with_name(f"{whl.name}.part{i + 1}of{n}")
        piece.write_bytes(data[i * step : (i + 1) * step])
        pieces.append(piece)
    whl.unlink()
    return pieces


def pieces_by_wheel(paths: Iterable[Path]) -> dict[str, list[Path]]:
    """The pieces among ``paths`` (``PIECE``), by the wheel they came from, each in order."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for p in paths:
        m = PIECE.fullmatch(p.name)
        if m:
            found.setdefault(m["name"], []).append((int(m["i"]), p))
    return {name: [p for _, p in sorted(ps)] for name, ps in sorted(found.items())}


def join(pieces: list[Path], dst: Path) -> Path:
    """The wheel the pieces of one ``split`` came from, written to ``dst``."""
    (order,) = pieces_by_wheel(pieces).values()
    m = PIECE.fullmatch(order[0].name)
    assert m is not None
    if len(order) != int(m["n"]):
        raise SystemExit(f"{dst.name}: {len(order)} of {m['n']} pieces")
    dst.write_bytes(b"".join(p.read_bytes() for p in order))
    return dst


def pack(wheels: list[Path], limit: int) -> list[list[Path]]:
    """First-fit by size into chunks of at most ``limit`` bytes; a wheel over the limit is
    split into pieces first (``split``), which are placed like wheels."""
    if limit < PIECE_MIN:
        raise SystemExit(
            f"the tracked tree leaves {limit / 2**20:.1f} MiB of a call's 64 for wheels: shrink "
            "the tree (the committed results' raw tgz files are the largest part)"
        )
    items: list[Path] = []
    for whl in wheels:
        items += split(whl, limit) if whl.stat().st_size > limit else [whl]
    chunks: list[list[Path]] = []
    sizes: list[int] = []
    for whl in sorted(items, key=lambda p: (-p.stat().st_size, p.name)):
        size = whl.stat().st_size
        for i, used in enumerate(sizes):
            if used + size <= limit:
                chunks[i].append(whl)
                sizes[i] += size
                break
        else:
            chunks.append([whl])
            sizes.append(size)
    return chunks


def place(staged: Path, limit: int) -> None:
    """Move the staged wheels into chunk1, chunk2, ... (`pack`), then drop the staging folder."""
    for i, chunk in enumerate(pack(sorted(staged.glob("*.whl")), limit), start=1):
        cdir = GPU_DIR / f"chunk{i}"
        cdir.mkdir()
        for whl in chunk:
            shutil.move(str(whl), cdir / whl.name)
    staged.rmdir()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only verify existing chunks")
    ap.add_argument("--keep-download", action="store_true", help="keep .gpu/download")
    ap.add_argument(
        "--repack", action="store_true", help="re-split the packed wheels to the tree's size now"
    )
    args = ap.parse_args(argv)
    tree = tracked_bytes()
    limit = chunk_limit(tree)

    if args.repack:
        staged = GPU_DIR / "staged"
        staged.mkdir(parents=True, exist_ok=True)
        for old in sorted(GPU_DIR.glob("chunk*")):
            for whl in old.glob("*.whl*"):
                shutil.move(str(whl), staged / whl.name)
            old.rmdir()
        for name, pieces in pieces_by_wheel(staged.iterdir()).items():
            join(pieces, staged / name)
            for piece in pieces:
                piece.unlink()
        place(staged, limit)
    elif not args.check:
        download(CORE + SMALL, CACHE)
        for old in GPU_DIR.glob("chunk*"):
            shutil.rmtree(old)
        staged = GPU_DIR / "staged"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for whl in sorted(CACHE.glob("*.whl")):
            dist = whl.name.split("-")[0]
            if dist in SLIM:
                dropped, kept = slim_wheel(whl, staged / whl.name, SLIM[dist])
                print(
                    f"[prepare] slimmed {whl.name}: {whl.stat().st_size / 2**20:.1f} -> "
                    f"{(staged / whl.name).stat().st_size / 2**20:.1f} MiB "
                    f"(dropped {dropped / 2**20:.0f} MiB unpacked, kept {kept} entries)",
                    flush=True,
                )
            else:
                shutil.copy2(whl, staged / whl.name)
        wanted = {s.split("==")[0].replace("-", "_").lower() for s in CORE + SMALL}
        got = {w.name.split("-")[0].lower() for w in staged.glob("*.whl")}
        if wanted != got:
            raise SystemExit(f"wheel set mismatch: missing {wanted - got}, extra {got - wanted}")
        place(staged, limit)
        if not args.keep_download:
            shutil.rmtree(CACHE)

    lines = []
    total = largest = 0
    wheels = 0
    for cdir in sorted(GPU_DIR.glob("chunk*")):
        csize = 0
        for whl in sorted(cdir.glob("*.whl*")):
            if whl.name.endswith(".whl"):
                verify_record(whl)
                wheels += 1
            size = whl.stat().st_size
            csize += size
            lines.append(f"{cdir.name}/{whl.name} {size} {sha256(whl)}")
        total += csize
        largest = max(largest, csize)
        print(
            f"[prepare] {cdir.name}: {len(list(cdir.glob('*.whl*')))} wheels and pieces, "
            f"{csize / 2**20:.1f} MiB",
            flush=True,
        )
        if csize > limit:
            raise SystemExit(f"{cdir.name} is over the chunk limit: --repack")
    wheels += verify_pieces(GPU_DIR)
    (GPU_DIR / "manifest.txt").write_text("\n".join(lines) + "\n")
    n_chunks = len(list(GPU_DIR.glob("chunk*")))
    print(f"wheels_packed: {wheels} (goal == {len(CORE) + len(SMALL)})")
    print(
        f"total_mib: {total / 2**20:.1f} in {n_chunks} chunks (goal: each <= "
        f"{limit / 2**20:.1f} MiB)"
    )
    if tree is not None:
        # a call carries the working tree and one chunk: over 64 MiB the call is refused
        print(
            f"tree_mib: {tree / 2**20:.1f} + the largest chunk {largest / 2**20:.1f} = "
            f"{(tree + largest) / 2**20:.1f} (goal < 64)"
        )
    return 0


def verify_pieces(gpu_dir: Path) -> int:
    """Each split wheel's pieces, over all chunks, joined and checked as a wheel; how many."""
    split_wheels = pieces_by_wheel(gpu_dir.glob("chunk*/*"))
    tmp = gpu_dir / "joined"
    tmp.mkdir(exist_ok=True)
    try:
        for name, pieces in split_wheels.items():
            verify_record(join(pieces, tmp / name))
    finally:
        shutil.rmtree(tmp)
    return len(split_wheels)


def tracked_bytes() -> int | None:
    """Bytes of the files git tracks (the working tree a device call carries), each rounded up
    to a 4 KiB block as the call's size check counts it, or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    paths = (ROOT / p for p in out.decode().split("\0") if p)
    return sum(-(-p.stat().st_size // 4096) * 4096 for p in paths if p.is_file())


if __name__ == "__main__":
    sys.exit(main())
