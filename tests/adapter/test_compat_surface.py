"""compat owns every SGLang hook target, the launch check's included; an SGLang without a
surface is refused in the launch check, whose hook is still registered on the newest one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang import compat, hooks
from specfsm_sglang.refusal import StartRefused


def test_launch_check_target_in_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch check's target is the Surface's; an unknown version falls back to the newest
    surface for the hooks that must refuse."""
    assert compat.surface().launch_check == "sglang.srt.server_args.ServerArgs.check_server_args"
    assert not hasattr(hooks, "LAUNCH_CHECK_TARGET")
    monkeypatch.setattr(compat, "sglang_version", lambda: "9.9.9")
    assert compat.surface_or_newest() == compat.SURFACES["0.5.23"]


def test_unknown_sglang_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """specfsm requested on an SGLang without a surface: one refusal line naming the versions."""
    for k in ("SPECFSM_CONFIG", "SPECFSM_CONFIG_JSON", "SPECFSM_LOG"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("SPECFSM_POLICY", "fixed:speculate=true")
    monkeypatch.setattr(compat, "sglang_version", lambda: "9.9.9")
    with pytest.raises(StartRefused):
        hooks.launch_check(SimpleNamespace(speculative_algorithm="EAGLE3"))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("specfsm: refusing to start: sglang: specfsm ")
    assert "found 9.9.9" in err[0]


def test_a_state_of_another_width_skips_the_draft_extend_graph_it_would_never_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where SGLang sizes every state's draft-extend graph at the launch's draft tokens (its
    width resolver reads the server arguments, 0.5.17), a state of another width is built
    with that graph off (the runner would refuse each replay); the launch's width, and an
    SGLang that resolves the overridden width (0.5.23), build as before."""
    import importlib
    import sys

    env = "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"
    monkeypatch.delenv(env, raising=False)
    from sglang.srt.environ import envs

    def launch_width(*, phase: str, server_args: object, num_draft_tokens: int = 0) -> int:
        return 0

    def bag_width(*, phase: str, num_draft_tokens: int = 0) -> int:
        return 0

    for resolver, skips in ((launch_width, True), (bag_width, False)):
        fake = SimpleNamespace(resolve_num_tokens_per_req=resolver)
        monkeypatch.setitem(sys.modules, "sglang.srt.speculative.spec_utils", fake)
        monkeypatch.setattr(
            importlib.import_module("sglang.srt.speculative"), "spec_utils", fake, False
        )
        assert compat.launch_width_draft_extend() is skips
        with compat.no_dead_draft_extend_graph(2, 8):
            assert envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.get() is skips
        assert envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.get() is False
        with compat.no_dead_draft_extend_graph(8, 8):
            assert envs.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH.get() is False
