"""One specfsm server's served records, read from a results tgz: its transition log (modes
and their wall times, the policy in force at each moment, the accept lengths and mean context
it logged) and its per-iteration trace (`SPECFSM_ITER_TRACE`, benchmarks/gpu/sitecustomize.py),
and the start-up profile's rows when the tgz kept them. `onset_replay.py` feeds them to a
policy."""

from __future__ import annotations

import bisect
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from specfsm.fsm.table import Mode
from specfsm.model.tables import load_table

#: the accept lengths a SPECULATING iteration is given: the verifies logged in this many seconds
#: before it, pooled (the log samples one iteration in `observe_every`, too few alone)
ACCEPT_WINDOW_S = 30.0


class Bundle:
    """One server's transition log and iteration trace (the files of one folder of the tgz)."""

    def __init__(self, lines: list[dict[str, Any]], rows: list[list[Any]], profile: str | None):
        self.lines = lines
        self.rows = rows
        self.row_ts = [r[0] for r in rows]
        self.profile = profile
        trans = [x for x in lines if x.get("event") == "specfsm.transition"]
        self.trans = trans
        self.trans_ts = [x["ts"] for x in trans]
        #: (ts, verifies, accepted tokens) of every logged line that carries accept lengths,
        #: as running sums; (ts, mean_ctx) of every line that carries a mean context
        acc = [(x["ts"], x["accept_lens"]) for x in lines if x.get("accept_lens") and "ts" in x]
        self.acc_ts = [a[0] for a in acc]
        self.acc_n = [0]
        self.acc_sum = [0]
        for _, lens in acc:
            self.acc_n.append(self.acc_n[-1] + len(lens))
            self.acc_sum.append(self.acc_sum[-1] + sum(lens))
        ctx = [(x["ts"], x["mean_ctx"]) for x in lines if x.get("mean_ctx") and "ts" in x]
        self.ctx_ts = [c[0] for c in ctx]
        self.ctx = [c[1] for c in ctx]

    def mode_at(self, t: float) -> Mode:
        i = bisect.bisect_right(self.trans_ts, t)
        return Mode(self.trans[i - 1]["dst"]) if i else Mode.SPECULATING

    def accept_at(self, t: float, default: float) -> float:
        """The mean accept length of the verifies logged in `ACCEPT_WINDOW_S` before `t`."""
        i = bisect.bisect_right(self.acc_ts, t)
        j = bisect.bisect_left(self.acc_ts, t - ACCEPT_WINDOW_S)
        n = self.acc_n[i] - self.acc_n[j]
        return (self.acc_sum[i] - self.acc_sum[j]) / n if n else default

    def ctx_at(self, t: float) -> int:
        """The batch's mean context the log last recorded before `t` (0: none yet)."""
        i = bisect.bisect_right(self.ctx_ts, t)
        return int(self.ctx[i - 1]) if i else 0

    def policy_at(self, t: float) -> tuple[dict[str, Any], list[tuple[float, float]]] | None:
        """The policy in force at `t`, as (its spec, the stretches of wall time it decided in up
        to `t`): a control-file swap decides from its line on; the configured policy (as the
        start-up profile priced it, else as configured) from its line, and again after each
        unpin, with what it learned before (the adapter puts the same policy back). None after
        a pin: no policy decided."""
        configured: dict[str, Any] | None = None
        cfg_periods: list[tuple[float, float]] = []
        current: tuple[dict[str, Any], list[tuple[float, float]]] | None = None
        since = 0.0
        for x in self.lines:
            ts = x.get("ts", 0.0)
            if x.get("event") != "specfsm.config" or ts > t:
                continue
            req = x.get("request")
            if current is not None and current[1] is cfg_periods:
                cfg_periods.append((since, ts))  # the configured policy stops deciding here
            if req is None and isinstance(x.get("policy"), dict):
                configured, cfg_periods = spec_from_describe(x["policy"]), []
                current = (configured, cfg_periods)
            elif isinstance(req, dict) and "policy" in req:
                current = (dict(req["policy"]), [])
            elif isinstance(req, dict) and req.get("pin") is None and configured is not None:
                current = (configured, cfg_periods)
            elif isinstance(req, dict) and "pin" in req:
                current = None
            since = ts
        if current is None:
            return None
        spec, periods = current
        return spec, [*periods, (since, t)]


def spec_from_describe(d: dict[str, Any]) -> dict[str, Any]:
    """A policy spec from the description a config line logged (``describe()``)."""
    spec = {"name": d["policy"], **{k: v for k, v in d.items() if k not in _NOT_SPEC}}
    if spec.get("shapes") == []:
        del spec["shapes"]  # described empty: on/off of the launch shape, the spec's default
    cost = d.get("cost")
    if isinstance(cost, dict):
        spec |= {"table": cost["table"], "shape": cost["shape"]}
    return spec


#: described fields that are not spec keys (the cost model is given by table and shape)
_NOT_SPEC = ("policy", "cost", "ctx_aware", "profile")


def load_bundles(tgz: Path) -> list[Bundle]:
    """Every folder of `tgz` holding ``specfsm/transitions-rank0.jsonl`` and a non-empty
    ``iters/specfsm/``."""
    files: dict[str, bytes] = {}
    with tarfile.open(tgz) as tf:
        for m in tf.getmembers():
            if m.isfile() and (
                m.name.endswith("transitions-rank0.jsonl")
                or "/iters/specfsm/" in "/" + m.name
                or m.name.endswith("profile-0.csv")
            ):
                fh = tf.extractfile(m)
                if fh is not None:
                    files[m.name] = fh.read()
    out = []
    for name in sorted(files):
        if not name.endswith("specfsm/transitions-rank0.jsonl"):
            continue
        root = name[: -len("specfsm/transitions-rank0.jsonl")]
        lines = [json.loads(s) for s in io.StringIO(files[name].decode()) if s.strip()]
        rows: list[list[Any]] = []
        for k, v in files.items():
            if k.startswith(root + "iters/specfsm/"):
                rows.extend(json.loads(s) for s in io.StringIO(v.decode()) if s.strip())
        if not rows:
            continue
        rows.sort(key=lambda r: r[0])
        prof = files.get(root + "specfsm/profile-0.csv")
        path = None
        if prof is not None:
            path = str(Path("/tmp") / f"onset_replay_profile_{abs(hash(root))}.csv")
            Path(path).write_bytes(prof)
        out.append(Bundle(lines, rows, path))
    return out


def profile_rows(path: str) -> list[tuple[str, int, int, int, float]]:
    """The start-up profile's rows (a cost CSV, `specfsm.model.tables`)."""
    return load_table(path).rows
