"""The real SGLang HTTP server (``python -m sglang.launch_server``) on CPU, as a subprocess.

:class:`HttpServer` starts the server with the test bed's tiny models (the same settings as
:func:`.engine.engine_args`, turned into command-line flags) on a free loopback port, with
``SPECFSM_SGLANG_CPU=1`` in its environment: ``specfsm_cpu_boot.pth`` boots the CPU test bed
at interpreter start in the server and in the scheduler / detokenizer processes it spawns, and
the test bed's plugin (entry point ``specfsm_cpu``) enables the CPU hooks and, when a specfsm
configuration is in the environment (:func:`.fsm.fsm_env`), the specfsm plugin runs specfsm.
It waits for ``/health``, talks JSON over HTTP (:meth:`HttpServer.post`,
:meth:`HttpServer.get`, e.g. ``/generate`` or ``/metrics``) and stops the server with SIGTERM
(SGLang's own handler takes its children down), then checks that no process of its tree is
left and the port is free again.

    with HttpServer(spec="EAGLE", agree="mid", env=fsm_env(tmp, policy)) as srv:
        srv.generate([[5, 6, 7]], max_new_tokens=8)

Standard library only on this side (``urllib``); ``psutil`` (pinned) to list the tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from specfsm_testbed import engine as E


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``port`` can be bound on ``host`` (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def server_argv(args: dict[str, Any]) -> list[str]:
    """``sglang.Engine`` keyword arguments as ``launch_server`` flags: ``True`` -> ``--flag``,
    ``False`` / ``None`` -> omitted, anything else -> ``--flag value``."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        else:
            argv += [flag, str(value)]
    return argv


class ServerError(RuntimeError):
    """The server did not start, or did not stop cleanly; the message ends with its log tail."""


class HttpServer:
    """``python -m sglang.launch_server`` on CPU with the test bed's models, on a free port.

    ``engine_kwargs`` are :func:`.engine.engine_args`'s (``spec``, ``agree``, ``tree``,
    ``overlap``, SGLang overrides); ``env`` is added to this process's environment for the
    server (e.g. :func:`.fsm.fsm_env`); the server's stdout / stderr go to ``log_path``.
    """

    def __init__(
        self,
        env: dict[str, str] | None = None,
        log_path: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.args = E.engine_args(**engine_kwargs)
        self.env = dict(os.environ)
        self.env.update({"SPECFSM_SGLANG_CPU": "1", "HF_HUB_OFFLINE": "1"})
        self.env.setdefault("TRANSFORMERS_OFFLINE", "1")
        self.env.update(env or {})
        if log_path is None:
            import tempfile

            log_path = Path(tempfile.mkdtemp(prefix="sglang-http-")) / "server.log"
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None
        self.tree: set[int] = set()

    # ------------------------------------------------------------------------ lifecycle
    def argv(self) -> list[str]:
        """The server's command line."""
        flags = server_argv({**self.args, "host": self.host, "port": self.port})
        return [sys.executable, "-m", "sglang.launch_server", *flags]

    def start(self, timeout_s: float = 240.0) -> HttpServer:
        """Start the server and wait until ``/health`` answers 200 (ServerError otherwise)."""
        if not port_free(self.port, self.host):
            raise ServerError(f"port {self.port} is taken")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            # Its own session: a stray child can be found (and killed) by process group.
            self.proc = subprocess.Popen(
                self.argv(),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # children it left behind
                raise ServerError(f"server exited with {self.proc.returncode}\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                if self.get("/health", timeout_s=5)[0] == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"no healthy server after {timeout_s:.0f} s\n{self.log_tail()}")
            time.sleep(0.5)
        self.tree = self._descendants()
        return self

    def _descendants(self) -> set[int]:
        import psutil

        assert self.proc is not None
        try:
            root = psutil.Process(self.proc.pid)
            return {self.proc.pid, *(p.pid for p in root.children(recursive=True))}
        except psutil.NoSuchProcess:
            return set()

    def _group(self) -> set[int]:
        """Pids in the server's process group (its session leader's pid): orphans included."""
        import psutil

        if self.proc is None:
            return set()
        found = set()
        for p in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getpgid(p.pid) == self.proc.pid:
                    found.add(p.pid)
        return found

    def alive(self) -> list[int]:
        """Pids of the server's process tree (as seen at start and now) and process group still
        running."""
        import psutil

        pids = self.tree | self._group()
        if self.proc is not None:
            pids |= self._descendants()
        left = []
        for pid in sorted(pids):
            with contextlib.suppress(psutil.NoSuchProcess):
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
        return left

    def stop(self, timeout_s: float = 60.0) -> float:
        """SIGTERM the server and wait for its whole tree to end and the port to be free;
        returns the seconds that took. If anything is left after ``timeout_s``, it is killed
        (SIGKILL to the process group) and ServerError says what was left."""
        if self.proc is None:
            return 0.0
        self.tree |= self._descendants()
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        deadline = t0 + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None and not self.alive() and port_free(self.port):
                return time.monotonic() - t0
            time.sleep(0.2)
        left = self.alive()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        raise ServerError(
            f"server not down {timeout_s:.0f} s after SIGTERM (left: {left}, port free: "
            f"{port_free(self.port)}); killed\n{self.log_tail()}"
        )

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # --------------------------------------------------------------------------- HTTP
    def request(
        self, method: str, path: str, body: Any = None, timeout_s: float = 120.0
    ) -> tuple[int, str]:
        """(status, body text) of one HTTP request; a JSON ``body`` is sent as JSON."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode(errors="replace")

    def get(self, path: str, timeout_s: float = 30.0) -> tuple[int, str]:
        """(status, text) of ``GET path`` (e.g. ``/health``, ``/metrics``)."""
        return self.request("GET", path, timeout_s=timeout_s)

    def post(self, path: str, body: Any, timeout_s: float = 120.0) -> Any:
        """``POST path`` with a JSON body; the parsed JSON answer (ServerError unless 200)."""
        status, text = self.request("POST", path, body, timeout_s)
        if status != 200:
            raise ServerError(f"POST {path}: HTTP {status}: {text[:500]}")
        return json.loads(text)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int | Sequence[int] = 16,
        **extra: Any,
    ) -> list[dict[str, Any]]:
        """Greedy ``/generate`` for token-id prompts in one batched request (the server runs
        with ``skip_tokenizer_init``); SGLang's output dicts."""
        lens = (
            [max_new_tokens] * len(prompts)
            if isinstance(max_new_tokens, int)
            else list(max_new_tokens)
        )
        body = {
            "input_ids": [list(map(int, p)) for p in prompts],
            "sampling_params": [E.sampling_params(n) for n in lens],
            **extra,
        }
        return list(self.post("/generate", body))
