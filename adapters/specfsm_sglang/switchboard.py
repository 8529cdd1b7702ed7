"""Which policy one rank's machine decides with, and why: the switchboard (control plane).

- the configured policy, built at start-up; once the start-up profile measured this engine
  (`apply_profile`), the configured goodput policy priced with its rows, its profiled points
  seeded as measured;
- a pin (``{"pin": "PLAIN"}``: the fixed policy), an unpin (back to the configured one, the
  same instance with what it learned before the pin: step costs, acceptance; one the machine
  replaced after faults is built afresh) or a
  swap (``{"policy": {...}}``, priced with the profile too) read from the operator's control
  file every ``control_every`` decode forwards (rank 0 reads, every TP rank applies: `poll`),
  checked with the configuration's rules; every refusal and every change is one
  specfsm.config log line;
- the start-up profile's own schedule while it runs (`installed`).

`PolicySwitchboard` is a part of the controller (`Controller` is one); it owns the fields
below its "owns" line and reads the ones above it, which the rest of the controller sets.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from specfsm import FixedPolicy, Policy, SpecFSM, TransitionLog
from specfsm.model.acceptance import DraftShape
from specfsm_sglang.control import ControlFile, parse_control
from specfsm_sglang.profile_schedule import ProfileResult, seed_calibration
from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.schema import Config
from specfsm_sglang.server_checks import check_policy_shape, policy_shapes
from specfsm_sglang.values import make_policy


class PolicySwitchboard:
    """The controller's control plane (see the module docstring)."""

    # reads: the rest of the controller
    fsm: SpecFSM
    log: TransitionLog
    cfg: Config
    rank: int
    iteration: int
    tp_group: Any
    topk: int
    spec_steps: int
    spec_tokens: int
    shape_states: dict[DraftShape, Any]
    # owns
    #: the start-up profile's CSV and rows (`apply_profile`), and the configured policy's spec
    #: (priced with them once there are some): what an unpin goes back to
    profile_path: str | None
    profile_rows: list[tuple[str, int, int, int, float]]
    policy_spec: dict[str, Any]
    #: the configured policy as built (at start-up, or priced with the profile), which an unpin
    #: puts back; None once the machine replaced it after faults (the next unpin builds anew)
    configured_policy: Policy | None
    #: whether the configured policy is the one deciding (so a different one there now means
    #: the machine replaced it)
    configured_active: bool
    #: whether the start-up profile's schedule is deciding (`installed`): the control file
    #: waits meanwhile, and a change written before or during the profile applies after it
    holding: bool
    #: the control file (None: not watched) and how often it is polled
    control_file: str | None
    control_every: int
    _control: ControlFile
    #: control-file polls, and the longest one (ns): the poll must never block
    control_polls: int
    control_poll_max_ns: int

    def _init_switchboard(self, cfg: Config) -> None:
        self.profile_path = None
        self.profile_rows = []
        self.policy_spec = cfg.policy
        self.configured_policy = self.fsm.policy
        self.configured_active = True
        self.holding = False
        self.control_file = cfg.control_file
        self.control_every = cfg.control_every
        self._control = ControlFile(cfg.control_file or "")
        self.control_polls = 0
        self.control_poll_max_ns = 0

    @contextmanager
    def installed(self, policy: Policy) -> Iterator[None]:
        """`policy` decides meanwhile (the start-up profile's schedule); the policy installed
        before is back afterwards, whatever happens."""
        saved = self.fsm.policy
        self.fsm.policy = policy
        self.holding = True
        try:
            yield
        finally:
            self.fsm.policy = saved
            self.holding = False

    # ------------------------------------------------------------------ the start-up profile
    def apply_profile(self, result: ProfileResult) -> None:
        """Price the configured goodput policy with the start-up profile's rows (its
        ``profile``: `specfsm_sglang.profile`) and log what was measured; with no row measured
        the configured policy stays as built. ConfigError when the policy refuses the rows."""
        prof: dict[str, object] = {
            "path": result.path,
            "seconds": result.seconds,
            "rows": len(result.rows),
            "ctx": result.ctx,
            "phases": result.phases,
            "skipped": result.skipped,
        }
        line: dict[str, object] = {"profile": prof}
        if result.rows:
            self.profile_path = result.path
            self.profile_rows = result.rows
            self.policy_spec = self.with_profile(self.cfg.policy)
            self.fsm.policy, prof["seeded"] = self._profiled_policy(self.policy_spec, "profile")
            self.configured_policy, self.configured_active = self.fsm.policy, True
            line["policy"] = self.fsm.policy.describe()
        else:
            prof["note"] = "nothing measured: the policy keeps its table"
        self.log.config(line, iteration=self.iteration)

    def _profiled_policy(self, spec: dict[str, Any], key: str) -> tuple[Policy, int]:
        """The policy of `spec` priced with the start-up profile (`with_profile`), its profiled
        points seeded as measured in its calibration; with the number of points seeded."""
        policy = make_policy(self.with_profile(spec), key=key)
        if not self.profile_rows:
            return policy, 0
        return policy, seed_calibration(policy, self.profile_rows)

    def with_profile(self, spec: dict[str, Any]) -> dict[str, Any]:
        """`spec` priced with this engine's start-up profile: a goodput policy naming no
        ``profile`` of its own gets it (the configured one, an unpin, a control-file swap)."""
        if self.profile_path and spec.get("name") == "goodput" and "profile" not in spec:
            return {**spec, "profile": self.profile_path}
        return spec

    # ------------------------------------------------------------------ the control file
    def timed_poll(self) -> None:
        """`_poll_control`, counted and timed (its longest time is reported: it must never
        block the scheduler)."""
        t0 = time.perf_counter_ns()
        self._poll_control()
        dt = time.perf_counter_ns() - t0
        self.control_polls += 1
        if dt > self.control_poll_max_ns:
            self.control_poll_max_ns = dt

    def _poll_control(self) -> None:
        """Re-read the control file when it changed (rank 0 reads, every TP rank applies);
        not while the start-up profile runs (every rank holds the same: it runs on all of them).

        Never blocks: the file is opened only when ``os.stat`` says it is a regular file whose
        (mtime, size, inode) changed and that holds at most MAX_CONTROL_BYTES; a FIFO, a
        directory, a device or an oversized file is refused with one log line, never opened.
        """
        if self.holding:  # a pin now would stop the profile's schedule, and be undone by it
            return
        msg: Any = None
        if self.rank == 0:
            msg = self._control.read()
        if self.tp_group is not None:
            from specfsm_sglang.consensus import broadcast_object

            msg = broadcast_object(msg, self.tp_group)
        if msg is None:
            return
        kind, payload = msg
        if kind == "refused":
            self._log_control("refused", payload)
        else:
            self.apply_control(payload)

    def _log_control(self, outcome: str, reason: str, *request: Any) -> None:
        line: dict[str, object] = {"control": outcome, "reason": reason}
        if request:
            line["request"] = request[0]
        self.log.config(line, iteration=self.iteration)

    def apply_control(self, content: Any) -> None:
        """Pin a mode, unpin, or swap the policy, after checking the content with the config's
        schema (and a goodput policy's shape against this server's); every refusal is logged as
        specfsm.config with control=refused and the reason, every change with control=applied."""
        if self.configured_active and self.fsm.policy is not self.configured_policy:
            # the machine replaced the configured policy after faults: an unpin builds anew
            self.configured_policy, self.configured_active = None, False
        try:
            change = parse_control(content)
            if change.kind == "pin":
                policy: Policy = FixedPolicy(change.pin == "SPECULATING")
            elif change.kind == "policy":
                check_policy_shape(
                    change.policy, (self.topk, self.spec_steps, self.spec_tokens), "control.policy"
                )
                for s in policy_shapes(change.policy):
                    if s not in self.shape_states:
                        raise ConfigError(
                            "control.policy.shapes",
                            f"{s.label()} has no runtime state on this server (built: "
                            f'{[b.label() for b in self.shape_states]}; config key "shapes")',
                        )
                policy, _ = self._profiled_policy(change.policy or {}, "control.policy")
            else:  # unpin: back to the configured one, with what it learned
                policy = self._configured()
        except ConfigError as exc:
            self._log_control("refused", str(exc), content)
            return
        resumed = change.kind == "unpin" and policy is self.configured_policy
        self.fsm.policy = policy
        self.configured_active = change.kind == "unpin"
        if change.kind == "unpin":
            self.configured_policy = policy
        line: dict[str, object] = {
            "control": "applied",
            "request": content,
            "policy": policy.describe(),
        }
        if change.kind == "unpin":
            line["resumed"] = resumed
        self.log.config(line, iteration=self.iteration)

    def _configured(self) -> Policy:
        """The configured policy for an unpin: the instance that decided before (its learned
        costs and acceptance kept; its debounce and dwell run on from where they were), or,
        when the machine replaced it after faults, one built afresh."""
        if self.configured_policy is not None:
            return self.configured_policy
        policy, _ = self._profiled_policy(self.policy_spec, "policy")
        return policy
