"""specfsm's SGLang hooks (HookRegistry), registered by the plugin when specfsm is requested.

| target (compat.Surface)                     | type   | what it does                              |
|---------------------------------------------|--------|-------------------------------------------|
| ServerArgs.check_server_args (parent; always) | AFTER | check everything before workers start |
| Scheduler.__init__                          | BEFORE | refuse unsupported configurations         |
| Scheduler.__init__                          | AFTER  | prove the worker hooks ran (else refuse); |
|                                             |        | metrics with SGLang's labels; the         |
|                                             |        | start-up profile (config ``profile``)     |
| EAGLEWorkerV2.init_cuda_graphs              | AFTER  | build the 1-wide state, the controller    |
| EAGLEWorkerV2.forward_batch_generation      | AROUND | decide, transition, check contracts       |
| EAGLEWorkerV2.on_verify_complete_cpu        | AFTER  | accept lengths of the processed verify    |
| EAGLEWorkerV2._build_trivial_verify_input   | AFTER  | 1-wide verify: int64 candidates (kernel)  |
| Scheduler.get_next_batch_to_run             | AFTER  | running / queued counts                   |
| Scheduler.process_batch_result              | AFTER  | K-wide batch left flight; accept lengths  |
| Scheduler.on_idle                           | AFTER  | count SGLang's own idle leak checks       |
| BatchResultProcessor._resolve_spec_v2_tokens | AROUND | 1-wide rounds are not verify rounds  |
| TokenizerManager._calculate_spec_decoding_metrics | AFTER | accept length over K-wide rounds |

Other plugins extend each rank's controller through :func:`add_extension` (a
``controller.ControllerExtension``: wrap its ModeActions, add observers); the test bed's
test channel (``specfsm_testbed.channel``) is one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specfsm_sglang import compat, config
from specfsm_sglang.refusal import ConfigError, refuse
from specfsm_sglang.schema import Config
from specfsm_sglang.server_checks import check_server
from specfsm_sglang.values import ProfileSpec

if TYPE_CHECKING:
    from specfsm_sglang.controller import Controller, ControllerExtension

CONTROLLER_ATTR = "_specfsm_controller"


class _State:
    """This process's specfsm state (one scheduler rank per process)."""

    __slots__ = ("cfg", "controller", "tokenizer_active")

    def __init__(self) -> None:
        #: the configuration the scheduler-process hooks serve (`register`)
        self.cfg: Config | None = None
        self.controller: Controller | None = None
        #: the tokenizer-side accept-length hook rewrites SGLang's metric (an engine with specfsm)
        self.tokenizer_active = False


_state = _State()
_extensions: list[ControllerExtension] = []


def controller() -> Controller | None:
    """This process's controller (one scheduler rank per process), or None."""
    return _state.controller


def add_extension(ext: ControllerExtension) -> None:
    """Plug `ext` into every Controller this process builds from now on (call it from a
    plugin's load(); controllers are built after every plugin loaded)."""
    _extensions.append(ext)


def launch_check(server_args: Any) -> None:
    """In the engine's parent, before any worker starts (every engine start in the process,
    not only the first): check the configuration, the server's arguments and the policy's
    shape; refuse with one line; make sure the tokenizer-side metrics hook is in place."""
    if not config.requested():
        _state.tokenizer_active = False  # an engine without specfsm: leave SGLang's metric
        return
    try:
        cfg = config.resolve()
        try:
            compat.surface()
        except RuntimeError as exc:
            raise ConfigError("sglang", str(exc)) from None
        check_server(cfg, server_args)
    except ConfigError as exc:
        refuse(exc)
    _state.tokenizer_active = True
    ensure_tokenizer_side()


def register_launch_check() -> None:
    """Registered by the plugin in every process whether specfsm is requested or not (it
    returns at once when it is not): SGLang loads plugins once per process, and the engine a
    process starts later may ask for specfsm."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def after_check(result: Any, server_args: Any, *args: Any, **kwargs: Any) -> None:
        launch_check(server_args)

    HookRegistry.register(compat.surface_or_newest().launch_check, after_check, HookType.AFTER)


def register_refusal(exc: ConfigError) -> None:
    """Make every scheduler refuse to start with `exc` (the plugin loader swallows
    exceptions raised in load(), so the refusal travels as a hook that raises). The engine's
    parent refuses before that (`launch_check`); this is the fallback."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    def refuse_start(*args: Any, **kwargs: Any) -> None:
        refuse(exc)

    HookRegistry.register(compat.surface_or_newest().scheduler_init, refuse_start, HookType.BEFORE)


def _after_spec_metrics(result: Any, self: Any, meta_info: Any, recv_obj: Any, i: int) -> None:
    # accept length = tokens committed per K-wide verify including the bonus, exactly;
    # SGLang's completion_tokens / verify_ct would count PLAIN tokens too.
    if _state.tokenizer_active and meta_info.get("spec_verify_ct"):
        meta_info["spec_accept_length"] = (
            1.0 + meta_info["spec_num_correct_drafts"] / meta_info["spec_verify_ct"]
        )


def _after_trivial_verify(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    """The 1-wide verify input's ``draft_token`` (the candidates of ``verify_tree_greedy``) as
    int64: SGLang passes the previous round's int32 ``bonus_tokens`` through, which the CUDA
    kernel refuses ("Expected 'candidates' to be of type long (torch.int64)."; see
    ``compat.Surface.worker_trivial_verify``). Idempotent; an async cast, no device sync."""
    import torch

    draft = getattr(result, "draft_token", None)
    if draft is not None and draft.dtype != torch.int64:
        result.draft_token = draft.to(torch.int64)


def register_tokenizer_side() -> None:
    """The tokenizer-process hook (the engine's parent / the HTTP server's main process)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(
        compat.surface().tokenizer_spec_metrics, _after_spec_metrics, HookType.AFTER
    )


def ensure_tokenizer_side() -> None:
    """Apply the tokenizer-side hook in THIS process now, if it is not applied yet.

    SGLang's load_plugins() runs once per process; `launch_check` calls this at every engine
    start that asks for specfsm, so a process that started an engine without specfsm first
    gets it too (nobody needs to call it by hand).
    """
    from sglang.srt.plugins.hook_registry import HookRegistry

    if compat.surface().tokenizer_spec_metrics in HookRegistry._patched:
        return
    register_tokenizer_side()
    HookRegistry.apply_hooks()


def register(cfg: Config) -> None:
    """Register the hooks of a process whose engine asks for specfsm with `cfg` (the table in
    the module docstring; the scheduler-process ones do nothing in a process that builds no
    controller)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    s = compat.surface()
    _state.cfg = cfg
    _state.tokenizer_active = True
    HookRegistry.register(s.resolve_spec_tokens, _around_resolve_tokens, HookType.AROUND)
    register_tokenizer_side()
    for target, hook, kind in (
        (s.scheduler_init, _check_args, HookType.BEFORE),
        (s.scheduler_init, _check_installed, HookType.AFTER),
        (s.worker_init_graphs, _after_init_graphs, HookType.AFTER),
        (s.worker_forward, _around_forward, HookType.AROUND),
        (s.worker_verify_complete, _after_verify_complete, HookType.AFTER),
        (s.worker_trivial_verify, _after_trivial_verify, HookType.AFTER),
        (s.scheduler_next_batch, _after_next_batch, HookType.AFTER),
        (s.scheduler_process_result, _after_process_result, HookType.AFTER),
        (s.scheduler_idle, _after_idle, HookType.AFTER),
    ):
        HookRegistry.register(target, hook, kind)


def _cfg() -> Config:
    cfg = _state.cfg
    if cfg is None:  # the hooks below are registered by `register`, which sets it first
        raise RuntimeError("specfsm hooks ran before specfsm_sglang.hooks.register")
    return cfg


# ------------------------------------------------------------------------ start-up
def _check_args(self: Any, server_args: Any, *args: Any, **kwargs: Any) -> None:
    # normally refused in the parent already (launch_check); the scheduler checks again
    try:
        check_server(_cfg(), server_args)
    except ConfigError as exc:
        refuse(exc)


def _after_init_graphs(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    from specfsm_sglang.controller import Controller

    try:
        ctl = Controller(self, self.server_args, _cfg(), tuple(_extensions))
    except ConfigError as exc:  # e.g. the lag buffer does not fit: refuse in one line
        refuse(exc)
    setattr(self, CONTROLLER_ATTR, ctl)
    _state.controller = ctl


def _check_installed(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    worker = getattr(self, "draft_worker", None)
    ctl = None if worker is None else getattr(worker, CONTROLLER_ATTR, None)
    if ctl is None:
        refuse(
            ConfigError(
                "hooks",
                "its worker hooks did not run (was EAGLEWorkerV2 patched by another plugin "
                "first?); refusing to serve without specfsm",
            )
        )
    # SGLang's metrics collector exists by now (init_metrics_collector runs before
    # init_model_worker); specfsm's series take its labels on the rank that exports them
    ctl.start_metrics(compat.metrics_labels(self))
    spec = _cfg().profile_spec
    if spec is not None:
        _run_profile(ctl, spec, self)


def _run_profile(ctl: Controller, spec: ProfileSpec, scheduler: Any) -> None:
    """The start-up profile (config ``profile``), then the policy priced with what it measured;
    any failure refuses the start-up in one line naming the profile, not a traceback."""
    from specfsm_sglang.profile import StartupProfile

    try:
        ctl.apply_profile(StartupProfile(spec, ctl, scheduler).run())
    except ConfigError as exc:
        refuse(exc)
    except Exception as exc:
        refuse(
            ConfigError(
                "profile",
                f"the start-up profile failed: {type(exc).__name__}: {exc}"[:600]
                + ' (start without "profile" to serve on the shipped table)',
            )
        )


# ------------------------------------------------------------------------ each iteration
def _around_forward(orig: Any, self: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
    ctl = _state.controller
    if ctl is None:
        return orig(self, batch, *args, **kwargs)
    zt = ctl.zero_tax
    if not compat.is_decode_forward(batch):
        ctl.note_extend(batch)
        if zt is None:
            return orig(self, batch, *args, **kwargs)
        # zero-tax PLAIN (attached, not RESYNCING): the draft's prefill waits for RESYNCING
        return zt.prefill(
            lambda: orig(self, batch, *args, **kwargs),
            batch,
            zt.attached and ctl.flight.resync_left == 0,
            kwargs.get("on_publish"),
        )
    ctl.before_forward(batch)
    if zt is not None and zt.attached and not batch.forward_mode.is_idle():
        # PLAIN / RESYNCING, zero-tax: one target decode forward, nothing else (in
        # RESYNCING followed by the batched catch-up)
        result = ctl.plain_forward(zt, batch, kwargs.get("on_publish"))
    else:
        result = orig(self, batch, *args, **kwargs)
    ctl.after_forward(batch, result)
    return result


def _after_verify_complete(result: Any, self: Any, num_correct: Any, *a: Any, **k: Any) -> None:
    ctl = _state.controller
    if ctl is not None:
        ctl.on_verify_complete(num_correct)


def _after_next_batch(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    ctl = _state.controller
    if ctl is not None:
        ctl.note_schedule(self, result)


def _after_process_result(result: Any, self: Any, batch: Any, res: Any, *a: Any, **k: Any) -> None:
    ctl = _state.controller
    if ctl is not None:
        ctl.after_process_result(batch, res)


def _after_idle(result: Any, self: Any, *args: Any, **kwargs: Any) -> None:
    ctl = _state.controller
    if ctl is not None:
        ctl.on_idle()


def _around_resolve_tokens(orig: Any, self: Any, result: Any, batch: Any, *a: Any, **k: Any) -> Any:
    # A 1-wide round (PLAIN/DRAINING/RESYNCING) proposes no draft: SGLang would count it
    # as a verify with K-1 proposed drafts and 0 correct. Undo that per-request count so
    # spec_verify_ct, spec_num_proposed_drafts and the histogram describe K-wide rounds.
    if _state.controller is None or getattr(result, "speculative_num_draft_tokens", 2) != 1:
        return orig(self, result, batch, *a, **k)
    counted = [not (r.is_retracted or r.finished()) for r in batch.reqs]
    out = orig(self, result, batch, *a, **k)
    for req, was_counted in zip(batch.reqs, counted, strict=False):
        if was_counted and req.spec_verify_ct > 0:
            req.spec_verify_ct -= 1
            hist = req.spec_correct_drafts_histogram
            if hist and hist[0] > 0:
                hist[0] -= 1
    return out
