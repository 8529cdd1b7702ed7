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
