"""SGLang 0.5.23 CPU enablement: EAGLE / EAGLE-3 / STANDALONE speculative decoding on CPU.

Two halves:

* before any ``sglang.srt`` import, at interpreter start (``specfsm_cpu_boot.pth`` ->
  :func:`specfsm_cpu.boot.boot`): version pin, ``SGLANG_USE_CPU_ENGINE=1``,
  ``TORCHDYNAMO_DISABLE=1``, import-only stubs (:mod:`.stubs`) whose ``sgl_kernel`` carries the
  pure-torch op ports (:mod:`.ops`);
* after start-up, from this distribution's own SGLang plugin (:func:`enable`, called by
  ``specfsm_cpu.plugin:load``, entry point ``specfsm_cpu``, when ``SPECFSM_SGLANG_CPU=1``;
  the specfsm plugin knows nothing of the CPU bed): HookRegistry hooks
  (:mod:`.hooks`) for torch_native draft decode / target verify, the overlap switch and the
  overlap-mode row gather.

See docs/sglang-cpu.md.
"""

from __future__ import annotations

from specfsm_cpu.boot import SUPPORTED_SGLANG_VERSION, fail_loudly

__all__ = ["SUPPORTED_SGLANG_VERSION", "enable", "enabled_targets"]

_enabled: list[str] = []


def enabled_targets() -> list[str]:
    """Dotted paths this process has patched (empty until :func:`enable` ran)."""
    return list(_enabled)


def enable() -> None:
    """Register AND apply the CPU test bed's hooks in this process (idempotent).

    The hooks are registered with SGLang's ``HookRegistry`` and applied at once through it (not
    left to ``load_plugins()``'s ``apply_hooks``, which only logs a failed target): a target that
    fails to apply ends the process with a message on stderr. Consequence for other plugins: a
    hook on one of :data:`hooks.HOOKS`' targets registered after this call is skipped by
    ``apply_hooks`` (the target is already marked patched).

    Requires :func:`specfsm_cpu.boot.boot` to have run (it does at interpreter start
    when ``SPECFSM_SGLANG_CPU=1``); call it first when enabling by hand.
    """
    if _enabled:
        return
    from specfsm_cpu import boot as cpu_boot

    cpu_boot.check_sglang_version()
    if not cpu_boot._booted:
        fail_loudly(
            "specfsm_cpu.enable() ran before specfsm_cpu.boot.boot(): the "
            "interpreter-start hook did not run (is SPECFSM_SGLANG_CPU=1 set in this process, "
            "and is specfsm_cpu_boot.pth installed in site-packages?)"
        )
    from sglang.srt.plugins.hook_registry import HookRegistry

    from specfsm_cpu import hooks

    for target, hook_type, hook in hooks.HOOKS:
        HookRegistry.register(target, hook, hook_type)
    for target, _, _ in hooks.HOOKS:
        if target in HookRegistry._patched:
            continue
        try:
            HookRegistry._apply_target(target, HookRegistry._hooks[target])
        except Exception as exc:  # a failed patch must not be a log line
            fail_loudly(f"could not apply the CPU test bed hook on {target}: {exc!r}")
        HookRegistry._patched.add(target)
        _enabled.append(target)
