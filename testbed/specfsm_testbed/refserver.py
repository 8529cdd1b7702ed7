"""A no-speculation reference engine in a child process of its own.

SGLang keeps its runtime configuration process-global, so two live engines with different
speculative settings in one process interfere (the second one's tokenizer manager reads the
first one's spec config). Tests therefore get reference outputs from this child: JSON lines
in (`{"prompts": [[...]], "lens": [..]}`), JSON lines out (`[[output ids], ...]`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


class ReferenceServer:
    """Greedy no-speculation outputs from a child-process engine, cached per (prompt, len)."""

    def __init__(self, **engine_kwargs: Any) -> None:
        # Started through a short-lived intermediate process, so the server is NOT a descendant
        # of this process: SGLang's Engine.shutdown() kills its caller's whole process tree,
        # which would take the reference engine down with every specfsm engine.
        server = [
            sys.executable,
            "-m",
            "specfsm_testbed.refserver",
            json.dumps(engine_kwargs),
        ]
        launcher = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", launcher, *server],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        ready = self._readline()
        if ready != "ready":
            raise RuntimeError(f"reference engine failed to start: {ready!r}")
        self.cache: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def _readline(self) -> Any:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("reference engine exited")
            if line.startswith("@@"):
                return json.loads(line[2:])

    def __call__(
        self, prompts: Sequence[Sequence[int]], max_new: Sequence[int] | int
    ) -> list[list[int]]:
        lens = [max_new] * len(prompts) if isinstance(max_new, int) else list(max_new)
        keys = [(tuple(int(t) for t in p), int(n)) for p, n in zip(prompts, lens, strict=True)]
        todo = [k for k in dict.fromkeys(keys) if k not in self.cache]
        if todo:
            assert self.proc.stdin is not None
            req = {"prompts": [list(k[0]) for k in todo], "lens": [k[1] for k in todo]}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            for k, out in zip(todo, self._readline(), strict=True):
                self.cache[k] = out
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        """EOF on its stdin makes the server shut its engine down and exit."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        for _ in self.proc.stdout:  # drain until the server closes its end (it has exited)
            pass
        self.proc.wait(timeout=10)


def _serve() -> None:
    from specfsm_testbed import engine as E

    kwargs = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    eng = E.make_engine(spec=None, **kwargs)
    try:
        print("@@" + json.dumps("ready"), flush=True)
        for line in sys.stdin:
            req = json.loads(line)
            outs = eng.generate(
                input_ids=req["prompts"],
                sampling_params=[E.sampling_params(n) for n in req["lens"]],
            )
            print("@@" + json.dumps([list(o["output_ids"]) for o in outs]), flush=True)
    finally:
        eng.shutdown()


if __name__ == "__main__":
    _serve()
