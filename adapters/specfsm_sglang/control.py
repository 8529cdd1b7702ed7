"""The operator's control file, read without ever blocking the scheduler.

`ControlFile.read` opens the file only when ``os.stat`` says it is a regular file whose
(type, mtime, size, inode) changed and that holds at most `MAX_CONTROL_BYTES`; a FIFO, a
directory, a device or an oversized file is refused with a reason, never opened. What the
content means (pin, unpin, a policy) is checked by `parse_control` with the configuration's
rules and applied by the controller's switchboard (`Controller.apply_control`), on every TP
rank.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

import attrs

from specfsm_sglang.refusal import ConfigError
from specfsm_sglang.values import check_choice, check_keys, check_object, make_policy

#: The control file is read only when it is a regular file of at most this many bytes.
MAX_CONTROL_BYTES = 64 * 1024


class ControlFile:
    """One control file path and the signature of the version last seen."""

    def __init__(self, path: str) -> None:
        self.path = path
        #: (type, mtime_ns, size, inode) of the version last read or refused
        self.sig: tuple[Any, ...] | None = None

    def read(self) -> tuple[str, Any] | None:
        """('content', parsed JSON) / ('refused', reason) when the file changed, else None."""
        path = self.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.sig = None
            return None
        except OSError as exc:
            return self._refusal(("error", exc.errno or 0), f"cannot stat: {exc}")
        sig = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, st.st_size, st.st_ino)
        if sig == self.sig:
            return None
        self.sig = sig
        if not stat.S_ISREG(st.st_mode):
            return (
                "refused",
                f"control_file: {path} is {_file_kind(st.st_mode)}, not a regular "
                "file; it is not opened (nothing may block the scheduler)",
            )
        if st.st_size > MAX_CONTROL_BYTES:
            return (
                "refused",
                f"control_file: {path} holds {st.st_size} bytes, more than the "
                f"limit of {MAX_CONTROL_BYTES}; not read",
            )
        try:
            # O_NONBLOCK: if the path was swapped for a FIFO since the stat, open returns at once
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            return ("refused", f"control_file: cannot open {path}: {exc.strerror}")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return ("refused", f"control_file: {path} is not a regular file; not read")
            data = os.read(fd, MAX_CONTROL_BYTES + 1)
        except OSError as exc:
            return ("refused", f"control_file: cannot read {path}: {exc.strerror}")
        finally:
            os.close(fd)
        if len(data) > MAX_CONTROL_BYTES:
            return ("refused", f"control_file: {path} grew past {MAX_CONTROL_BYTES} bytes")
        try:
            return ("content", json.loads(data))
        except ValueError as exc:
            return ("refused", f"control_file: {path} is not JSON: {exc}")

    def _refusal(self, sig: tuple[Any, ...], reason: str) -> tuple[str, Any] | None:
        if sig == self.sig:
            return None
        self.sig = sig
        return ("refused", f"control_file: {reason}")


def _file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((what for test, what in kinds if test(mode)), "not a regular file")


# ------------------------------------------------------------------------------- its content
CONTROL_KEYS = ("pin", "policy")


@attrs.frozen
class ControlChange:
    """A checked control-file request: pin a mode, unpin, or swap the policy."""

    kind: str  # "pin", "unpin" or "policy"
    pin: str | None = None
    policy: dict[str, Any] | None = None


def parse_control(content: object) -> ControlChange:
    """Check control-file content with the config's rules; ConfigError ``control.<key>: ...``."""
    obj = check_object(
        "control", content, '{"pin": "PLAIN" | "SPECULATING" | null} or {"policy": {...}}'
    )
    check_keys("control", obj, CONTROL_KEYS)
    if "pin" in obj and "policy" in obj:
        raise ConfigError("control", "give either pin or policy, not both")
    if "pin" in obj:
        pin = obj["pin"]
        if pin is None:
            return ControlChange("unpin")
        return ControlChange("pin", pin=check_choice("control.pin", pin, ("SPECULATING", "PLAIN")))
    if "policy" in obj:
        make_policy(obj["policy"], key="control.policy")
        return ControlChange("policy", policy=obj["policy"])
    raise ConfigError("control", 'empty: give {"pin": ...} or {"policy": {...}}')
