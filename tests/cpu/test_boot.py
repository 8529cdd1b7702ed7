"""The interpreter-start boot (.pth), the version pin and the plugin entry point."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

pytest.importorskip("sglang")


def _run(code: str, *, cpu: bool, timeout: int = 180) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPECFSM_SGLANG_CPU", "SGLANG_USE_CPU_ENGINE", "TORCHDYNAMO_DISABLE")
    }
    if cpu:
        env["SPECFSM_SGLANG_CPU"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


PROBE = textwrap.dedent("""
    import os, sys
    def probe():
        mod = sys.modules.get("sgl_kernel")
        return (
            getattr(mod, "__specfsm_stub__", False),
            getattr(sys.modules.get("torchvision"), "__specfsm_stub__", False),
            os.environ.get("SGLANG_USE_CPU_ENGINE"),
            os.environ.get("TORCHDYNAMO_DISABLE"),
        )
""")


def test_pth_boots_the_process_and_spawned_children(tmp_path: Path) -> None:
    """The .pth hook runs at interpreter start, before any user code, in the parent AND in a
    multiprocessing ``spawn`` child (SGLang's scheduler and detokenizer are spawned)."""
    script = tmp_path / "probe.py"
    script.write_text(
        PROBE
        + textwrap.dedent("""
        if __name__ == "__main__":
            import multiprocessing as mp
            parent = probe()  # nothing imported by this script yet
            with mp.get_context("spawn").Pool(1) as pool:
                child = pool.apply(probe)
            print(parent, child)
        """)
    )
    env = dict(os.environ, SPECFSM_SGLANG_CPU="1")
    env.pop("SGLANG_USE_CPU_ENGINE", None)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    expected = "(True, True, '1', '1')"
    assert proc.stdout.strip() == f"{expected} {expected}"


def test_pth_is_a_no_op_without_the_flag() -> None:
    proc = _run(PROBE + "\nprint(probe())\n", cpu=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "(False, False, None, None)"


def test_wrong_sglang_version_fails_loudly() -> None:
    proc = _run(
        textwrap.dedent("""
        import specfsm_cpu.boot as b
        b.SUPPORTED_SGLANG_VERSION = "0.0.1"
        b.check_sglang_version()
        print("still running")
        """),
        cpu=False,
    )
    assert proc.returncode == 3
    assert "still running" not in proc.stdout
    assert "supports only sglang==0.0.1" in proc.stderr
    assert "found sglang==0.5.23" in proc.stderr


def test_plugin_entry_points_are_registered() -> None:
    """specfsm's plugin (the specfsm wheel) and the test bed's two (specfsm-testbed)."""
    eps = {ep.name: ep for ep in metadata.entry_points(group="sglang.srt.plugins")}
    assert eps["specfsm"].value == "specfsm_sglang.plugin:load"
    assert eps["specfsm"].dist is not None and eps["specfsm"].dist.name == "specfsm"
    for name, value in (
        ("specfsm_cpu", "specfsm_cpu.plugin:load"),
        ("specfsm_test", "specfsm_testbed.channel:load"),
    ):
        dist = eps[name].dist
        assert eps[name].value == value and dist is not None
        assert dist.name == "specfsm-testbed"


def test_stub_placeholders_raise_when_called() -> None:
    import sgl_kernel  # the stub (conftest booted this process)
    import torchvision.transforms
    from specfsm_cpu import ops
    from specfsm_cpu.stubs import StubCalledError

    assert sgl_kernel.verify_tree_greedy_cpu is ops.verify_tree_greedy_cpu
    with pytest.raises(StubCalledError, match="import-only stub"):
        sgl_kernel.decode_attention_cpu()
    with pytest.raises(StubCalledError):
        torchvision.transforms.Compose([])
    import torch

    assert not hasattr(torch.ops.sgl_kernel, "convert_weight_packed")  # AMX stays off


def test_transformers_sees_no_torchvision() -> None:
    from transformers.utils import import_utils

    assert import_utils.is_torchvision_available() is False


def test_plugin_enables_the_hooks_in_a_booted_process() -> None:
    proc = _run(
        textwrap.dedent("""
        from sglang.srt.plugins import load_plugins
        load_plugins()
        import specfsm_cpu as cpu
        print(len(cpu.enabled_targets()))
        """),
        cpu=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "4"
