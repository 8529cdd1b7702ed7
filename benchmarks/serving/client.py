"""The load client: plays a :class:`~traces.Trace` against one SGLang HTTP server.

Every request is a streaming ``POST /generate`` with token ids (the servers run with
``skip_tokenizer_init``), greedy, ``ignore_eos``, so a request that is not cut must end with
exactly its ``max_new_tokens``. The client times the first streamed token (TTFT), the last one,
and counts tokens into 0.1 s bins as they arrive, so a phase's throughput is the tokens that
arrived inside it; `token_bins` sums a run's bins over its requests for the run's record. A
request marked ``abort_after`` is cut by closing the connection after that many tokens; SGLang
aborts it on the disconnect.

The load is split over ``procs`` client processes (one asyncio loop each, raw HTTP/1.1 over
asyncio streams): one Python loop parsing every streamed chunk of a few hundred concurrent
streams would itself become the bottleneck on a fast server. Closed loop ``j`` and Poisson
arrival ``i`` belong to process ``j % procs`` / ``i % procs``; closed-loop requests take their
index from one shared counter, so request ``k`` is the same request on every server.

Standard library only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from traces import Trace, arrivals, request

#: the CPU test bed's flag (``specfsm_cpu_boot.pth`` boots the bed in a process that has it)
CPU_BED_FLAG = "SPECFSM_SGLANG_CPU"
BIN_S = 0.1
CLOSED_BASE = 1_000_000  # closed-loop request indices start here (Poisson ones are 0..)


async def _read_chunked(reader: asyncio.StreamReader) -> Any:
    """Yield the body chunks of a chunked HTTP/1.1 response."""
    while True:
        line = await reader.readline()
        if not line:
            return
        size = int(line.split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return
        data = await reader.readexactly(size + 2)
        yield data[:-2]


async def stream_generate(
    host: str, port: int, body: dict[str, Any], abort_after: int | None, t0: float
) -> dict[str, Any]:
    """One streaming request; the record of what came back and when (seconds from ``t0``)."""
    rec: dict[str, Any] = {"t_send": time.time() - t0, "status": "error", "tokens": 0}
    payload = json.dumps(body).encode()
    head = (
        f"POST /generate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    bins: dict[int, int] = {}
    ids: list[int] = []
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + payload)
        await writer.drain()
        status_line = await reader.readline()
        code = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        if code != 200:
            n = int(headers.get("content-length", "0") or 0)
            text = (await reader.readexactly(n)).decode(errors="replace") if n else ""
            rec.update(status="error", error=f"HTTP {code}: {text[:300]}")
            return rec
        buf = b""
        finish = None
        async for chunk in _read_chunked(reader):
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if not event.startswith(b"data:"):
                    continue
                data = event[5:].strip()
                if data == b"[DONE]":
                    continue
                msg = json.loads(data)
                now = time.time() - t0
                new = msg.get("output_ids") or []
                meta = msg.get("meta_info") or {}
                ct = int(meta.get("completion_tokens", len(ids) + len(new)))
                if len(ids) + len(new) == ct:
                    ids.extend(new)  # incremental streaming
                elif len(new) == ct:
                    ids = list(new)  # cumulative streaming
                got = ct - rec["tokens"]
                if got > 0:
                    if rec["tokens"] == 0:
                        rec["t_first"] = now
                    rec["tokens"] = ct
                    rec["t_last"] = now
                    b = int(now / BIN_S)
                    bins[b] = bins.get(b, 0) + got
                fr = meta.get("finish_reason")
                if fr:
                    finish = fr.get("type") if isinstance(fr, dict) else str(fr)
                if abort_after is not None and rec["tokens"] >= abort_after:
                    rec["status"] = "cut_by_client"
                    return rec
        rec["finish"] = finish
        rec["status"] = "done" if finish else "truncated"
        return rec
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
        return rec
    finally:
        rec["t_end"] = time.time() - t0
        rec["bins"] = bins
        rec["ids_sha"] = hashlib.sha1(json.dumps(ids).encode()).hexdigest()[:16]
        if writer is not None:
            writer.close()


def token_bins(recs: Iterable[dict[str, Any]]) -> list[int]:
    """Every request's tokens per `BIN_S` bin as the client received them, bin 0 at the trace's
    start, up to the last bin that got any: the run's record keeps them, so where a window's
    last tokens arrived can be read from a results folder (the request records drop theirs)."""
    total: dict[int, int] = {}
    for r in recs:
        for k, v in r.get("bins", {}).items():
            total[int(k)] = total.get(int(k), 0) + int(v)
    return [total.get(b, 0) for b in range(max(total, default=-1) + 1)]


def _body(trace: Trace, k: int) -> tuple[dict[str, Any], int, int | None]:
    r = request(trace, k)
    sp = {"temperature": 0.0, "max_new_tokens": r.max_new_tokens, "ignore_eos": True}
    body = {"input_ids": r.prompt, "sampling_params": sp, "stream": True}
    return body, r.max_new_tokens, r.abort_after


async def _run(
    trace: Trace, url: str, rank: int, procs: int, t0: float, counter: Any
) -> list[dict[str, Any]]:
    u = urlparse(url)
    host, port = u.hostname or "127.0.0.1", int(u.port or 80)
    out: list[dict[str, Any]] = []

    async def one(k: int, phase: int) -> None:
        body, n, cut = _body(trace, k)
        rec = await stream_generate(host, port, body, cut, t0)
        rec.update(
            k=k, phase=phase, max_new_tokens=n, abort_after=cut, prompt_len=len(body["input_ids"])
        )
        out.append(rec)

    def next_k() -> int:
        with counter.get_lock():
            counter.value += 1
            return CLOSED_BASE + int(counter.value) - 1

    async def closed_loop(j: int) -> None:
        for i, (p, (a, b)) in enumerate(zip(trace.phases, trace.phase_bounds(), strict=True)):
            if p.kind != "closed" or p.level <= j:
                continue
            wait = t0 + a - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            while time.time() < t0 + b:
                await one(next_k(), i)

    async def poisson() -> None:
        tasks = []
        for idx, (i, at) in enumerate(arrivals(trace)):
            if idx % procs != rank:
                continue
            wait = t0 + at - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.ensure_future(one(idx, i)))
        if tasks:
            await asyncio.gather(*tasks)

    top = max((int(p.level) for p in trace.phases if p.kind == "closed"), default=0)
    jobs = [closed_loop(j) for j in range(top) if j % procs == rank]
    jobs.append(poisson())
    await asyncio.gather(*jobs)
    return out


def _worker(
    trace: Trace, url: str, rank: int, procs: int, t0: float, counter: Any, path: str
) -> None:
    recs = asyncio.run(_run(trace, url, rank, procs, t0, counter))
    with open(path, "w") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")


def play(
    trace: Trace,
    url: str,
    out_dir: Path,
    procs: int = 4,
    on_start: Callable[[float], None] | None = None,
) -> tuple[float, list[dict[str, Any]]]:
    """Play ``trace`` against ``url`` with ``procs`` client processes: the wall-clock start
    (``time.time()``) and every request's record (also written to
    ``out_dir/requests-<rank>.jsonl``), times in seconds from that start. ``on_start`` gets
    that start before the processes do."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    t0 = time.time() + 2.0  # every process starts its clock together
    if on_start is not None:
        on_start(t0)
    paths = [str(out_dir / f"requests-{r}.jsonl") for r in range(procs)]
    ps = [
        ctx.Process(target=_worker, args=(trace, url, r, procs, t0, counter, paths[r]))
        for r in range(procs)
    ]
    # the client processes are HTTP clients: with the CPU test bed's flag in the driver's
    # environment each spawned child would boot the bed's SGLang stubs first (seconds on a
    # busy 2-core host), starting past t0 and missing the first requests of its schedule
    bed_flag = os.environ.pop(CPU_BED_FLAG, None)
    try:
        for p in ps:
            p.start()
    finally:
        if bed_flag is not None:
            os.environ[CPU_BED_FLAG] = bed_flag
    for p in ps:
        p.join()
    recs: list[dict[str, Any]] = []
    for r, path in enumerate(paths):
        if ps[r].exitcode != 0:
            raise RuntimeError(f"client process {r} exited with {ps[r].exitcode}")
        with open(path) as fh:
            recs.extend(json.loads(line) for line in fh if line.strip())
    return t0, sorted(recs, key=lambda r: r["k"])
