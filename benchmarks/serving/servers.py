"""The servers a serving benchmark compares, started the way operators start them:
``python -m sglang.launch_server`` in its own process group, ready when ``/health`` answers.

Servers (``--servers``):

- ``nospec``: no speculation;
- ``eagle``: stock EAGLE, without the plugin on the path at all;
- ``specfsm``: the same EAGLE server with the specfsm plugin, launched with the goodput policy
  and the start-up profile; its *variants* are set through specfsm's control file between runs,
  on the one server: ``goodput`` (as launched: the unpin resumes that policy with what it
  learned in the runs before, as on a long-running server), ``plain`` (pinned PLAIN),
  ``spec`` (pinned SPECULATING), ``example`` (``examples/gpu_server/specfsm.json``'s policy), and
  ``plain_nodraft`` (pinned PLAIN with the draft's prefill skipped by the harness switch
  in benchmarks/gpu/sitecustomize.py: how much deferring the draft prefill can save at most),
  and ``phases`` (pinned phase by phase to the better static server's mode: the per-phase
  oracle run on one server, ``phase_pins.py``);
- ``adaptive``: SGLang's own ``--speculative-adaptive`` (EAGLE, topk 1);
- ``specfsm_shapes``: EAGLE with the specfsm plugin and ``examples/gpu_server/specfsm_shapes.json``
  as shipped (the goodput policy choosing PLAIN or one of chains 1-7, priced by its start-up
  profile; no variants), or with keys set by ``--shapes-set``; launched at its policy's
  ``shape`` (the example's chain 7), so a candidate such as a chain-3 launch with chains 1-2
  is served by setting ``shapes`` and ``policy`` alone.

Two beds: ``gpu`` (SGLang 0.5.17 on the H200 box, dummy Llama-3.1-8B weights made to agree
with an EAGLE draft by ``benchmarks/gpu/agree_weights.py``; paths from run_on_device.sh) and
``cpu`` (SGLang 0.5.23 on this machine's test bed: the tiny agreeing target and draft).

Standard library only (the CPU bed imports the test bed for its model paths and flags).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpu_bed
import traces
from launch import CHAIN, CHAIN7, shapes_launch
from start_errors import ExitedAtStart, exit_cause

ROOT = Path(__file__).resolve().parents[2]
SERVERS = ("nospec", "eagle", "specfsm", "adaptive", "specfsm_shapes")
#: the servers with the specfsm plugin on their path
PLUGGED = ("specfsm", "specfsm_shapes")
VARIANTS = ("goodput", "plain", "spec", "example", "plain_nodraft", "phases")
EXAMPLE = ROOT / "examples" / "gpu_server" / "specfsm.json"


def server_of(label: str, names: Collection[str]) -> str:
    """The server a run's label names: the label itself where it is one of `names`
    (``specfsm_shapes``), else the server before its variant (``specfsm_goodput``)."""
    return label if label in names else label.split("_")[0]


GPU_GRAPH_BS = [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256]


#: where a server's HTTP port is drawn: below Linux's ephemeral range (32768-60999), so that
#: no outgoing connection (the client's, an engine's own) takes it between the draw and the bind
PORT_RANGE = (20000, 30000)

#: uvicorn's line when the port was taken after all; the process then waits without serving
PORT_CLASH = "address already in use"

#: start attempts, each on a fresh port, when the port was taken
PORT_ATTEMPTS = 3


def free_port() -> int:
    """A port free on 127.0.0.1 now, drawn from `PORT_RANGE` (the kernel's pick when none is)."""
    for port in random.sample(range(*PORT_RANGE), 64):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PortClash(RuntimeError):
    """The server could not bind its port (taken between the draw and the bind)."""


def flags(args: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in args.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is False or v is None:
            continue
        elif isinstance(v, list):
            out += [flag, *map(str, v)]
        else:
            out += [flag, str(v)]
    return out


def flush_cache(url: str, timeout_s: float = 60.0) -> bool:
    """Empty the server's radix cache (``/flush_cache``; refused while requests run, so
    retried): every run starts from the same cold cache, whatever ran before on the server."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            req = urllib.request.Request(url + "/flush_cache", data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.5)
    return False


def example_policy() -> dict[str, Any]:
    return dict(json.loads(EXAMPLE.read_text())["policy"])


@dataclass
class Bed:
    """Where and how servers run: ``gpu`` or ``cpu``."""

    name: str
    work: Path  # per-run files: configs, control files, logs
    env: dict[str, str] = field(default_factory=dict)

    @property
    def skip_flag(self) -> Path:
        """The harness switch of the ``plain_nodraft`` variant (exists while it runs)."""
        return self.work / "skip_draft_prefill"

    def device(self) -> str:
        """The card the servers run on, for the runs' header (a figure is of one card)."""
        return "cpu" if self.name == "cpu" else gpu_bed.device_name()

    def engine_args(self, server: str, launch: dict[str, int] | None = None) -> dict[str, Any]:
        """The server's launch arguments; `launch`: a ``specfsm_shapes`` server's draft shape
        flags (`shapes_launch`; default `CHAIN7`)."""
        if self.name == "cpu":
            from specfsm_testbed import engine as E

            spec = None if server == "nospec" else "EAGLE"
            args = E.engine_args(
                spec=spec, agree="mid", overlap=True, max_running_requests=16, max_total_tokens=8192
            )
            if server == "specfsm_shapes":
                args.update(launch or CHAIN7)
            args.pop("device", None)
            args["device"] = "cpu"
            args["log_level"] = "info"
        else:
            w = Path(os.environ.get("WORK", "/tmp/specfsm_gpu"))
            args = {
                "model_path": str(w / "models" / "llama8b"),
                "load_format": "dummy",
                "dtype": "bfloat16",
                "attention_backend": os.environ.get("ATTN", "flashinfer"),
                "sampling_backend": "pytorch",
                "skip_tokenizer_init": True,
                "cuda_graph_bs_decode": GPU_GRAPH_BS,
                "cuda_graph_max_bs_decode": max(GPU_GRAPH_BS),
                "max_running_requests": 256,
                "mem_fraction_static": gpu_bed.mem_fraction(server, {**os.environ, **self.env}),
                "random_seed": 0,
                "log_level": "info",
                # logs every garbage collection of SGLang's processes longer than this (s):
                # the HTTP-side pauses of bursty runs (pauses.py) are to be told apart by it
                "gc_warning_threshold_secs": 0.1,
            }
            if server != "nospec":
                args["speculative_algorithm"] = "EAGLE"
                args["speculative_draft_model_path"] = str(w / "models" / "eagle_llama8b")
                args.update((launch or CHAIN7) if server == "specfsm_shapes" else CHAIN)
        if server == "adaptive":
            args["speculative_adaptive"] = True
        args["incremental_streaming_output"] = True
        args["enable_metrics"] = True
        return args

    def server_env(self, server: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        if self.name == "cpu":
            env.update(
                {"SPECFSM_SGLANG_CPU": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            )
            env["SGLANG_PLUGINS"] = "specfsm_cpu,specfsm" if server in PLUGGED else "specfsm_cpu"
            if server in PLUGGED:
                env["SPECFSM_SKIP_DRAFT_PREFILL"] = str(self.skip_flag)
            hooked = env.get("SPECFSM_ITER_TRACE") or env.get("SPECFSM_SYNC_DEBUG")
            if hooked or server in PLUGGED:
                hook = self.work / "hook"
                hook.mkdir(parents=True, exist_ok=True)
                for name in ("sitecustomize.py", "hook_sync.py", "hook_iters.py", "hook_phases.py"):
                    shutil.copy(ROOT / "benchmarks" / "gpu" / name, hook)
                env["PYTHONPATH"] = os.pathsep.join(
                    x for x in (str(hook), env.get("PYTHONPATH", "")) if x
                )
        else:
            env["SPECFSM_AGREE"] = "mid"  # agree_weights.py's hook, in the box's sitecustomize
            # the plugin's distribution is on the path only for the specfsm server
            path = env.get("SERVING_PATH_STOCK", "")
            if server == "adaptive":
                env["SPECFSM_ADAPTIVE_GROW"] = "1"  # sitecustomize.py: the 0.5.17 start-up fix
            if server in PLUGGED:
                path = env.get("SERVING_PATH_PLUGIN", path)
                env["SGLANG_PLUGINS"] = "specfsm"
                env["SPECFSM_SKIP_DRAFT_PREFILL"] = str(self.skip_flag)
            env["PYTHONPATH"] = path
        return env


@dataclass
class Server:
    bed: Bed
    server: str
    log_path: Path
    fsm_config: dict[str, Any] | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    start_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def control_path(self) -> Path:
        return self.bed.work / f"control_{self.server}.json"

    def argv(self) -> list[str]:
        launch = shapes_launch(self.fsm_config) if self.server == "specfsm_shapes" else None
        args = {**self.bed.engine_args(self.server, launch), "host": "127.0.0.1", "port": self.port}
        return [sys.executable, "-m", "sglang.launch_server", *flags(args)]

    def start(self, timeout_s: float, say: Callable[[str], None] = print) -> None:
        """Launch the server and wait until it answers ``/health``; a port taken after all
        is drawn again (said through `say`), up to `PORT_ATTEMPTS` times. RuntimeError when
        it does not come up."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_once(timeout_s)
                return
            except PortClash as exc:
                if attempt == PORT_ATTEMPTS:
                    raise RuntimeError(f"{exc} ({attempt} ports tried)") from None
                self.port = free_port()
                say(f"{exc}; starting again on port {self.port}")

    def _start_once(self, timeout_s: float) -> None:
        env = self.bed.server_env(self.server)
        if self.server in PLUGGED:
            cfg = dict(self.fsm_config or {})
            cfg.setdefault("control_file", str(self.control_path))
            self.control_path.unlink(missing_ok=True)
            env["SPECFSM_CONFIG_JSON"] = json.dumps(cfg)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        seen = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv(),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        while True:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                cause = exit_cause(tail)
                raise ExitedAtStart(
                    f"{self.server}: server exited with {self.proc.returncode}"
                    + (f" ({cause})" if cause else "")
                    + f"\n{tail}",
                    cause,
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            seen, clash = self._log_says(seen, PORT_CLASH)
            if clash:
                self.stop()
                raise PortClash(f"{self.server}: port {self.port} was taken ({PORT_CLASH})")
            if time.monotonic() - t0 > timeout_s:
                self.stop()
                raise RuntimeError(
                    f"{self.server}: not healthy after {timeout_s:.0f} s\n{self.log_tail()}"
                )
            time.sleep(0.5)
        self.start_s = time.monotonic() - t0

    def _log_says(self, offset: int, text: str) -> tuple[int, bool]:
        """Whether the log's lines after byte `offset` hold `text` (case-insensitive), and the
        offset of the last whole line read (a line still being written is read next time)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            return offset, False
        whole = chunk[: chunk.rfind(b"\n") + 1]
        return offset + len(whole), text.encode() in whole.lower()

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            body: bytes = r.read()
        return body.decode()

    def warm(self, n: int = 2) -> None:
        """A few short requests, so a control-file change is read (it is read on iterations)."""
        tr = traces.Trace("warm", (traces.Phase("closed", n, 0.5),), traces.CPU_LENGTHS, seed=99)
        for k in range(n):
            r = traces.request(tr, k)
            body = {
                "input_ids": r.prompt,
                "sampling_params": {"temperature": 0.0, "max_new_tokens": 48, "ignore_eos": True},
            }
            req = urllib.request.Request(
                self.url + "/generate",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()

    def freeze_gc(self) -> str:
        """``/freeze_gc``: SGLang moves every object its processes hold now (tokenizer manager,
        scheduler, detokenizer) out of the garbage collector's reach, so a later collection
        walks only what serving allocates; "ok", or why not."""
        try:
            self.get("/freeze_gc")
        except OSError as exc:
            return f"failed: {exc}"
        return "ok"

    def kv_tokens(self) -> int | None:
        """The target's KV pool in tokens (``/get_server_info``, else the start-up log line)."""
        try:
            info = json.loads(self.get("/get_server_info"))
            for src in [info, *(info.get("internal_states") or [])]:
                if isinstance(src, dict) and src.get("max_total_num_tokens"):
                    return int(src["max_total_num_tokens"])
        except (OSError, ValueError):
            pass
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "max_total_num_tokens=" in line:
                return int(line.split("max_total_num_tokens=")[1].split(",")[0])
        return None

    def set_variant(self, variant: str, goodput: dict[str, Any]) -> None:
        """Set the specfsm server's variant through its control file (applied within
        ``control_every`` iterations; the caller waits before the trace)."""
        change: dict[str, Any]
        self.bed.skip_flag.unlink(missing_ok=True)
        if variant == "plain_nodraft":
            self.bed.skip_flag.write_text("")
            change = {"pin": "PLAIN"}
        elif variant == "plain":
            change = {"pin": "PLAIN"}
        elif variant == "spec":
            change = {"pin": "SPECULATING"}
        elif variant == "example":
            change = {"policy": example_policy()}
        elif variant == "goodput":
            # the policy the server was launched with (`goodput`), resumed by the unpin with
            # what it learned in the runs before, as a long-running server's would be
            change = {"pin": None}
        elif variant in ("PLAIN", "SPECULATING"):  # the phases variant's pin of one phase
            change = {"pin": variant}
        else:
            raise ValueError(f"unknown variant {variant!r}")
        self.control(change)

    def pin(self, mode: str) -> None:
        """Pin specfsm's mode (PLAIN or SPECULATING) through the control file."""
        self.control({"pin": mode})

    def control(self, change: dict[str, Any]) -> None:
        """Write specfsm's control file at once (read within ``control_every`` iterations)."""
        tmp = self.control_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(change))
        os.replace(tmp, self.control_path)

    def flush_cache(self, timeout_s: float = 60.0) -> bool:
        return flush_cache(self.url, timeout_s)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""
