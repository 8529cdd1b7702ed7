"""`specfsm logs replay` across recorded RESHAPE transitions: shape labels read back, each
stretch priced at its own shape, a replayed policy's reshapes followed, the CLI's shapes line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _log_lines import flap_lines, line, obs, run_cli, trans

from specfsm.logtools.reader import read_logs
from specfsm.logtools.replay import replay
from specfsm.policy.registry import make_policy, parse_spec


# ------------------------------------------------------------------------------ shapes
def reshape_lines(named: bool = True) -> list[str]:
    """A small run at bs 4: SPECULATING at chain3 (accept 2) to iteration 4, a RESHAPE to chain7
    at iteration 5 (its line carries chain3's last accept lengths, 2.5), then chain7 (accept 4,
    each line naming the round before it)."""
    cfg: dict[str, Any] = {"initial_mode": "SPECULATING", "topk": 1, "steps": 3, "draft_tokens": 4}
    if named:
        cfg["shape_states"] = {"launch": "chain3", "chain7": {"build_s": 0.1, "device_mib": 0.0}}
    out = [line("specfsm.config", 0, 0, 100.0, **cfg)]
    out += [obs(0, it, "SPECULATING") for it in range(1, 5)]  # accept_lens [2]
    reshape = trans(0, 5, "SPECULATING", "SPECULATING", "RESHAPE", "goodput: chain7")
    out.append(reshape[:-1] + ', "shape_from": "chain3", "shape_to": "chain7", "shape_us": 12.0}')
    for it in range(6, 10):
        out.append(
            line(
                "specfsm.observation",
                0,
                it,
                100.0 + it,
                mode="SPECULATING",
                bs=4,
                accept_lens=[4],
                accept_lens_iteration=it - 1,
            )
        )
    return out


class ReshapeAt:
    """A test policy: RESHAPE to `shape` at iteration `at`, otherwise nothing."""

    def __init__(self, at: int, shape: Any) -> None:
        self.at, self.next_shape, self.last_reason = at, shape, ""

    def decide(self, mode: Any, o: Any) -> Any:
        from specfsm.fsm.table import Event

        if o.iteration == self.at:
            self.last_reason = "test: reshape"
            return Event.RESHAPE
        return None

    def describe(self) -> dict[str, object]:
        return {"policy": "reshape-at", "at": self.at}


def _cost() -> Any:
    from specfsm.model.acceptance import DraftShape
    from specfsm.model.costs import CostModel, load_table

    return CostModel(load_table("h200_sglang0517_llama8b"), DraftShape.chain(3))


def test_shape_labels() -> None:
    """Shape labels as the log writes them read back, a tree's included."""
    from specfsm.logtools.shapes import shape_of
    from specfsm.model.acceptance import DraftShape

    for s in (DraftShape.chain(1), DraftShape.chain(7), DraftShape(4, 2, 16), DraftShape(4, 3, 8)):
        assert shape_of(s.label()) == s
    assert shape_of("nonsense") is None and shape_of(None) is None


def test_replay_prices_each_stretch_at_its_shape(tmp_path: Path) -> None:
    """Recorded RESHAPE chain3 -> chain7: the samples before it are priced at chain3 with
    chain3's accept length, from it on at chain7 with chain7's; the RESHAPE line's accept lengths
    (measured before it) count for chain3."""
    from specfsm.logtools.replay import price
    from specfsm.model.acceptance import DraftShape

    f = tmp_path / "reshape.jsonl"
    f.write_text("\n".join(reshape_lines()) + "\n")
    run = read_logs([str(f)]).engines()[0].ranks[0][0]
    cost = _cost()
    c3, c7 = DraftShape.chain(3), DraftShape.chain(7)
    res = replay(run, make_policy(parse_spec("fixed:speculate=true")), cost)
    assert res.iterations == list(range(1, 10))
    assert res.recorded_shapes == ["chain3"] * 4 + ["chain7"] * 5
    assert res.launch_shape == "chain3" and res.shapes_named
    spec_ms = 4 * cost.spec_ms(4, c3) + 5 * cost.spec_ms(4, c7)
    want = 1000.0 * (4 * 4 * 2.0 + 5 * 4 * 4.0) / spec_ms
    assert res.recorded_tps == pytest.approx(want)
    assert res.always_spec_tps == pytest.approx(want)
    # one shape throughout would have priced it differently
    assert res.recorded_tps != pytest.approx(
        price(cost, [r for r in run.observations], ["SPECULATING"] * 8, [2.0] * 4 + [4.0] * 4)
    )
    # the fixed policy never reshapes: its replay stays at chain3, with chain3's accept length
    # (2, then the RESHAPE line's 2.5, the last measured at chain3, from iteration 5 on)
    assert res.replayed_shapes == ["chain3"] * 9
    want = 1000.0 * (4 * 4 * 2.0 + 5 * 4 * 2.5) / (9 * cost.spec_ms(4, c3))
    assert res.replayed_tps == pytest.approx(want)
    assert [(d.iteration, d.trigger) for d in res.recorded] == [(5, "RESHAPE")]
    assert "chain3 2.10 (5)" in res.accept_len_source and "chain7 4.00 (4)" in res.accept_len_source


def test_replay_follows_the_replayed_reshape(tmp_path: Path) -> None:
    """A policy that reshapes where the recorded one did: the replayed machine follows it, the
    decisions agree, and both sequences price the same."""
    from specfsm.model.acceptance import DraftShape

    f = tmp_path / "reshape.jsonl"
    f.write_text("\n".join(reshape_lines()) + "\n")
    run = read_logs([str(f)]).engines()[0].ranks[0][0]
    res = replay(run, ReshapeAt(5, DraftShape.chain(7)), _cost())
    assert res.replayed_shapes == res.recorded_shapes
    assert res.decision_diffs() == []
    assert res.replayed_tps == pytest.approx(res.recorded_tps)


def test_replay_launch_from_shape_from(tmp_path: Path) -> None:
    """Without shape_states the launch shape is the first RESHAPE's shape_from; --shape (the
    `launch` argument) overrides it."""
    from specfsm.model.acceptance import DraftShape

    f = tmp_path / "reshape.jsonl"
    f.write_text("\n".join(reshape_lines(named=False)) + "\n")
    run = read_logs([str(f)]).engines()[0].ranks[0][0]
    policy = make_policy(parse_spec("fixed:speculate=true"))
    cost = _cost()
    res = replay(run, policy, cost)
    assert res.recorded_shapes[:4] == ["chain3"] * 4
    res5 = replay(
        run,
        make_policy(parse_spec("fixed:speculate=true")),
        cost,
        None,
        "zero_tax",
        DraftShape.chain(5),
    )
    assert res5.recorded_shapes == ["chain5"] * 4 + ["chain7"] * 5


def test_replay_without_shapes_unchanged(tmp_path: Path) -> None:
    """A log without shapes is priced at the cost model's shape, as before shapes existed."""
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(flap_lines(0)) + "\n")
    run = read_logs([str(f)]).engines()[0].ranks[0][0]
    cost = _cost()
    res = replay(run, make_policy(parse_spec("fixed:speculate=true")), cost, plain="zero_tax")
    assert not res.shapes_named and set(res.recorded_shapes) == {"chain3"}
    # samples: iteration 3 (transition line, SPECULATING, accept 2.5), 5 and 8 (PLAIN)
    assert res.recorded_modes == ["PLAIN", "PLAIN", "PLAIN"]
    assert res.always_spec_tps == pytest.approx(1000.0 * 3 * 4 * 2.5 / (3 * cost.spec_ms(4)))


def test_replay_cli_shapes_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI names the launch shape and counts SPECULATING samples per shape."""
    f = tmp_path / "reshape.jsonl"
    f.write_text("\n".join(reshape_lines()) + "\n")
    rc, out, _ = run_cli(capsys, "logs", "replay", str(f), "--policy", "fixed:speculate=true")
    assert rc == 0
    assert "shapes: launch chain3; RESHAPEs recorded 1, replayed 0" in out
    assert "chain3 9/9" not in out and "chain3 4/9, chain7 5/0" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(reshape_lines()).replace('"shape_to": "chain7"', '"shape_to": "x"'))
    rc, _, err = run_cli(capsys, "logs", "replay", str(bad), "--policy", "fixed:speculate=true")
    assert rc == 2 and "no readable shape_to" in err and "Traceback" not in err
