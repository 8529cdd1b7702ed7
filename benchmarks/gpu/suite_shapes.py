"""The specfsm acceptance suite's draft-shape phases (``specfsm_suite.py`` runs them):

``shapes``
    Needs specfsm with extra shapes (``--fsm-config '{"shapes": [...]}'``). At each concurrency of
    ``--shapes-c`` (default 1, 8, 32): decode tokens/s (the same L2 - L1 difference) of every
    static choice on this one engine, each shape held by a one-target ``ShapeCycle`` (a RESHAPE
    to it, then none) and PLAIN pinned, then of the shape-choosing policy ``--shapes-policy``
    (which shapes it ran: from the transition log). With specfsm shapes configured, the greedy
    phase also runs the ``shape_cycle`` schedule (every 2 forwards: each shape, PLAIN, back).

``steady``
    Needs specfsm with extra shapes. Continuous load instead of closed batches: at each
    concurrency of ``--steady-c``, ``c`` request loops each submit a request (a ctx-token prompt,
    a random 96-192 new tokens, greedy, ignore_eos) as soon as its previous one finished, for
    ``--steady-s`` seconds after a warm-up of a quarter of that; tokens/s = output tokens of the
    requests that finished inside the window / the window. Every static choice (as in
    ``shapes``) and the shape-choosing policy ``--shapes-policy``, each after a settle run. A
    closed batch (``shapes``) ends when its slowest request ends, which charges speculation for
    the spread of acceptance between requests; here finished requests are replaced at once, as
    under a server's steady load.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the engine shapes of the bring-up tables: chain 3 x topk 1 (4 tokens), the seeds' tree 2 x 4 (16)
from sglang_engine_bench import SPECS

#: launch shapes: the bring-up's chain and tree, plus the widest chain for the shapes phase (a
#: server launches with its widest shape: specfsm refuses extra shapes wider than the launch's)
SHAPES: dict[str, dict[str, int]] = {
    **SPECS,
    "chain7": {
        "speculative_num_steps": 7,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 8,
    },
}


class ShapePhases:
    """The ``shapes`` and ``steady`` phases, mixed into the suite (``specfsm_suite.Suite``): they
    use its engine, prompts, control file and results."""

    args: Any
    fsm: bool
    out: Path
    tag: str
    engine: Any

    if TYPE_CHECKING:  # the suite's plumbing, which these phases call

        def prompts(self, n: int, length: int) -> list[list[int]]: ...
        def generate(self, prompts: list[list[int]], new: int) -> list[dict[str, Any]]: ...
        def set_control(self, content: dict[str, Any]) -> None: ...
        def _decode_ms(self, prompts: list[list[int]], lens: tuple[int, int]) -> dict[str, Any]: ...
        def emit(self, **kw: Any) -> None: ...
        def say(self, text: str) -> None: ...

    def shape_labels(self) -> list[str]:
        """The launch shape and the configured extra shapes, as ShapeCycle targets."""
        from specfsm.model.acceptance import DraftShape, shape_text

        spec = SHAPES[self.args.spec]
        launch = shape_text(
            DraftShape(
                spec["speculative_eagle_topk"],
                spec["speculative_num_steps"],
                spec["speculative_num_draft_tokens"],
            )
        )
        extra = json.loads(self.args.fsm_config).get("shapes", [])
        return [launch, *[str(x) for x in extra if str(x) != launch]]

    def shape_variants(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, control) of every static choice (each shape held by a one-target ShapeCycle,
        PLAIN pinned) and of the shape-choosing policy ``--shapes-policy``."""
        cycle = "specfsm_testbed.shape_policies:ShapeCycle"
        variants: list[tuple[str, dict[str, Any]]] = [
            (f"static_{x}", {"policy": {"name": cycle, "targets": [x], "every": 1}})
            for x in self.shape_labels()
        ]
        variants.append(("static_PLAIN", {"pin": "PLAIN"}))
        variants.append(("specfsm", {"policy": json.loads(self.args.shapes_policy)}))
        return variants

    def phase_shapes(self) -> None:
        a = self.args
        if not self.fsm:
            return
        variants = self.shape_variants()
        ctx = a.ctx[0]
        log = self.out / f"transitions_{self.tag}.jsonl"
        for c in a.shapes_c:
            prompts = self.prompts(c, ctx)
            self.generate(prompts, 1)
            for name, control in variants:
                n0 = len(log.read_text().splitlines()) if log.exists() else 0
                self.set_control({"pin": None})
                self.set_control(control)
                self.generate(prompts, 32)  # the control file, a RESHAPE, the policy settle
                r = self._decode_ms(prompts, a.sweep_lens)
                tps = 1e3 * c / r["ms_per_token"] if r["ms_per_token"] > 0 else 0.0
                ran: dict[str, int] = {}
                if log.exists():
                    for line in log.read_text().splitlines()[n0:]:
                        x = json.loads(line)
                        if x.get("event") == "specfsm.transition":
                            key = f"{x.get('src')}->{x.get('dst')}:{x.get('shape_to', '')}"
                            ran[key] = ran.get(key, 0) + 1
                self.emit(phase="shapes", variant=name, c=c, ctx=ctx, tok_s=tps, ran=ran, **r)
                self.say(f"shapes c {c} {name}: {tps:.0f} tok/s accept {r['accept_length']}")
            self.engine.flush_cache()
        self.set_control({"pin": None})

    def _steady_tok_s(self, c: int, ctx: int, seconds: float) -> dict[str, Any]:
        """Output tokens/s with `c` requests always in flight (each replaced when it finishes),
        counted over the requests that finished inside the window after a warm-up."""
        import asyncio

        rng = random.Random(c)
        prompts = self.prompts(c, ctx)
        warm = seconds / 4.0
        done: list[tuple[float, int]] = []

        async def loop(i: int, t_end: float) -> None:
            while time.perf_counter() < t_end:
                sp = {
                    "temperature": 0.0,
                    "max_new_tokens": rng.randint(96, 192),
                    "ignore_eos": True,
                }
                out = await self.engine.async_generate(input_ids=prompts[i], sampling_params=sp)
                done.append((time.perf_counter(), len(out["output_ids"])))

        async def main() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(loop(i, t0 + warm + seconds) for i in range(c)))
            return t0

        t0 = self.engine.loop.run_until_complete(main())
        lo, hi = t0 + warm, t0 + warm + seconds
        toks = sum(n for t, n in done if lo <= t <= hi)
        return {"tok_s": toks / seconds, "finished": sum(1 for t, _ in done if lo <= t <= hi)}

    def phase_steady(self) -> None:
        a = self.args
        if not self.fsm:
            return
        variants = self.shape_variants()
        ctx = a.ctx[0]
        for c in a.steady_c:
            self.generate(self.prompts(c, ctx), 1)
            for name, control in variants:
                self.set_control({"pin": None})
                self.set_control(control)
                self._steady_tok_s(c, ctx, a.steady_s / 4.0)  # settle: RESHAPE, calibration
                r = self._steady_tok_s(c, ctx, a.steady_s)
                self.emit(phase="steady", variant=name, c=c, ctx=ctx, **r)
                self.say(f"steady c {c} {name}: {r['tok_s']:.0f} tok/s ({r['finished']} done)")
            self.engine.flush_cache()
        self.set_control({"pin": None})
