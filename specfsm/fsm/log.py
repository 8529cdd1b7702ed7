"""The transition log: structlog JSON lines, each carrying rank and iteration.

Event names (fixed; tools and offline replay key on them):
  specfsm.config         once per rank at start-up (iteration 0): the resolved configuration;
                         again at each runtime control change (`control`: applied / refused)
                         with the iteration it took effect at
  specfsm.transition     per transition: ts, src, dst, trigger (the FSM event; `event` is
                         structlog's own key, the line's name), reason, bs, policy inputs,
                         action durations in microseconds; a shape change (trigger RESHAPE, src
                         = dst) adds shape_from / shape_to (DraftShape labels, e.g. "chain3";
                         shape_from null when the launch shape was never named) and shape_us
                         (its one action's duration; exit_us / enter_us are null); a
                         transition the policy decided with a `Verdict` adds `decision`: its
                         rule, event, shape, bound, margin and every option's predicted tok/s
                         (`Verdict.as_json`, docs/policies.md)
  specfsm.observation    sampled policy inputs and the mode (every N iterations / T seconds)

Policy inputs on transition and observation lines: bs, running, queued, accept_lens, and
  accept_lens_iteration  (with non-empty accept_lens, when the adapter knows it) the iteration of
                         the K-wide round these accept lengths come from
  accept_lens_stale      (with non-empty accept_lens) true when they are not the current
                         speculation's: the line's mode (a transition's src) is not SPECULATING,
                         or the round ran before the last entry to SPECULATING. The policy saw
                         them all the same (offline replay feeds them back unchanged)
  mean_ctx               only when measured (a context-aware policy; 0 means unknown: omitted)
  prefill_tokens         only on a prefill observation (a policy that sees prefills): the prompt
                         tokens of the prefill forward about to run
  draft_debt             only when > 0: deferred prompt tokens the draft has not seen (zero-tax
                         PLAIN), which a catch-up would extend over
  specfsm.action_failed  a mode action raised: which, where, the exception
  specfsm.policy_failed  a policy raised or returned a wrong value: policy, iteration, error,
                         its fault count and the limit (the FAULT transition follows)
  specfsm.policy_replaced the faulting policy was replaced by the fixed PLAIN policy (once)
  specfsm.catchup        an engine caught its draft up (RESYNCING): requests, lag tokens, the
                         milliseconds it took, requests whose lag passed the buffer (caught up
                         over the newest part only), and whether every request is caught up
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

import structlog

from specfsm.fsm.observation import Observation
from specfsm.fsm.table import Event, Mode

if TYPE_CHECKING:
    from specfsm.fsm.verdict import Verdict
    from specfsm.model.acceptance import DraftShape

CONFIG = "specfsm.config"
TRANSITION = "specfsm.transition"
OBSERVATION = "specfsm.observation"
ACTION_FAILED = "specfsm.action_failed"
POLICY_FAILED = "specfsm.policy_failed"
POLICY_REPLACED = "specfsm.policy_replaced"
CATCHUP = "specfsm.catchup"


def _serializer() -> Any:
    """orjson when installed (about 2x faster per line), else the standard library."""
    try:
        import orjson
    except ImportError:
        return json.dumps

    def dumps(obj: Any, **_: Any) -> str:
        return orjson.dumps(obj, default=str).decode()

    return dumps


def json_logger(dest: IO[str] | str | Path, iso_ts: bool = False) -> Any:
    """A structlog logger writing one JSON object per line to `dest` (a stream or a path).

    `ts` is seconds since the epoch (UTC) by default; `iso_ts=True` writes ISO 8601 instead
    (about 3 us more per line).
    """
    stream: IO[str]
    if isinstance(dest, (str, Path)):
        stream = sys.stderr if str(dest) == "-" else open(dest, "a", buffering=1)  # noqa: SIM115
    else:
        stream = dest
    return structlog.wrap_logger(
        structlog.WriteLogger(cast(TextIO, stream)),
        processors=[
            structlog.processors.TimeStamper(fmt="iso" if iso_ts else None, utc=True, key="ts"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_serializer()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=True,
    )


_NO_OBS: dict[str, object] = {}


def obs_fields(
    obs: Observation,
    mode: Mode | None = None,
    accept_lens_iteration: int | None = None,
    speculating_since: int = 0,
) -> dict[str, object]:
    """The policy inputs of `obs` as flat log fields, taken in `mode` (see the module
    docstring: accept_lens_iteration / accept_lens_stale / mean_ctx only when meaningful)."""
    out: dict[str, object] = {
        "bs": obs.decode_bs,
        "running": obs.running,
        "queued": obs.queued,
        "accept_lens": list(obs.accept_lens),
    }
    if obs.accept_lens:
        if accept_lens_iteration is not None:
            out["accept_lens_iteration"] = accept_lens_iteration
        out["accept_lens_stale"] = mode is not Mode.SPECULATING or (
            accept_lens_iteration is not None and accept_lens_iteration < speculating_since
        )
    if obs.mean_ctx > 0:
        out["mean_ctx"] = obs.mean_ctx
    if obs.prefill_tokens > 0:
        out["prefill_tokens"] = obs.prefill_tokens
    if obs.draft_debt > 0:
        out["draft_debt"] = obs.draft_debt
    return out


class TransitionLog:
    """Writes specfsm's events. `logger=None` uses structlog's global configuration (so
    `structlog.testing.capture_logs()` sees the lines); otherwise any structlog logger."""

    def __init__(self, logger: Any = None, rank: int = 0) -> None:
        self._log = logger if logger is not None else structlog.get_logger("specfsm")
        self.rank = rank
        #: the iteration of the K-wide round whose accept lengths the observations carry; set
        #: by the adapter when it records them (None: unknown, the field is not written)
        self.accept_lens_iteration: int | None = None
        #: the iteration of the last transition into SPECULATING (0: from the start)
        self.speculating_since = 0

    def _obs(self, obs: Observation, mode: Mode) -> dict[str, object]:
        return obs_fields(obs, mode, self.accept_lens_iteration, self.speculating_since)

    def config(self, config: Mapping[str, object], iteration: int = 0) -> None:
        """The resolved configuration (start-up: iteration 0) or a runtime control change
        (`iteration`: the one it takes effect at, to place it on a timeline)."""
        self._log.info(CONFIG, rank=self.rank, iteration=iteration, **config)

    def transition(
        self,
        *,
        iteration: int,
        src: Mode,
        dst: Mode,
        event: Event,
        reason: str,
        obs: Observation | None,
        exit_us: float | None,
        enter_us: float | None,
        shape: DraftShape | None = None,
        prev_shape: DraftShape | None = None,
        shape_us: float | None = None,
        verdict: Verdict | None = None,
    ) -> None:
        extra: dict[str, object] = {}
        if shape is not None:  # a RESHAPE: which shape to which, and how long the swap took
            extra = {
                "shape_from": prev_shape.label() if prev_shape is not None else None,
                "shape_to": shape.label(),
                "shape_us": shape_us,
            }
        if verdict is not None:
            extra["decision"] = verdict.as_json()
        self._log.info(
            TRANSITION,
            rank=self.rank,
            iteration=iteration,
            src=src.value,
            dst=dst.value,
            trigger=event.name,
            reason=reason,
            **(_NO_OBS if obs is None else self._obs(obs, src)),
            exit_us=exit_us,
            enter_us=enter_us,
            **extra,
        )
        if dst is Mode.SPECULATING and src is not Mode.SPECULATING:
            self.speculating_since = iteration

    def observation(self, obs: Observation, mode: Mode, policy: object = None) -> None:
        """The sampled inputs and mode; with a `policy` that has ``view(obs)`` also what it
        believes there (its prices, its learned state) under ``policy``: a sampled line is
        where its numbers can be set beside the step as served."""
        fields = self._obs(obs, mode)
        view = getattr(policy, "view", None)
        if callable(view):
            try:
                fields["policy"] = view(obs)
            except Exception as exc:  # a log line: a broken view must not stop the scheduler
                fields["policy"] = {"error": f"{type(exc).__name__}: {exc}"}
        self._log.info(
            OBSERVATION, rank=self.rank, iteration=obs.iteration, mode=mode.name, **fields
        )

    def action_failed(
        self, *, iteration: int, action: str, src: Mode, dst: Mode, event: Event, exc: BaseException
    ) -> None:
        self._log.error(
            ACTION_FAILED,
            rank=self.rank,
            iteration=iteration,
            action=action,
            src=src.name,
            dst=dst.name,
            trigger=event.name,
            error=f"{type(exc).__name__}: {exc}",
            exc_info=exc,
        )

    def policy_failed(
        self,
        *,
        iteration: int,
        policy: str,
        mode: Mode,
        error: str,
        faults: int,
        limit: int,
        exc: BaseException | None = None,
    ) -> None:
        """One line per policy fault; `at` is where an exception was raised (file:line)."""
        at = None
        tb = exc.__traceback__ if exc is not None else None
        if tb is not None:
            while tb.tb_next is not None:
                tb = tb.tb_next
            code = tb.tb_frame.f_code
            at = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
        self._log.error(
            POLICY_FAILED,
            rank=self.rank,
            iteration=iteration,
            policy=policy,
            mode=mode.name,
            error=error,
            at=at,
            faults=faults,
            limit=limit,
        )

    def policy_replaced(
        self, *, iteration: int, old: str, new: Mapping[str, object], faults: int
    ) -> None:
        self._log.error(
            POLICY_REPLACED,
            rank=self.rank,
            iteration=iteration,
            old=old,
            new=dict(new),
            faults=faults,
        )

    def catchup(
        self, *, iteration: int, rows: int, tokens: int, ms: float, overflow_rows: int, done: bool
    ) -> None:
        self._log.info(
            CATCHUP,
            rank=self.rank,
            iteration=iteration,
            rows=rows,
            tokens=tokens,
            ms=round(ms, 3),
            overflow_rows=overflow_rows,
            done=done,
        )
