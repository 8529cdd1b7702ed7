"""The names that travel between the engine, the policies and the logs, one definition each.

Each is a `str` enum: a member equals its text (``StepKind.SPEC == "spec"``), so an adapter
or a log line that carries the text still matches, and JSON writes the text.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """A str enum whose str() and format() are its value (Python 3.12 formats the name)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class StepKind(TextEnum):
    """What the last completed decode forward ran (`Observation.step_kind`)."""

    SPEC = "spec"  # a verify iteration of `Observation.step_shape`
    PLAIN = "plain"  # a zero-tax PLAIN step: one target decode forward, no draft work
    WARM = "warm"  # a 1-token verify + a 1-token draft-extend (warm PLAIN, DRAINING's forward)
    RESYNC = "resync"  # a zero-tax step + the catch-up draft-extend over the lag
    UNKNOWN = ""  # the adapter does not know (or nothing ran yet)


class PlainVariant(TextEnum):
    """Which PLAIN the engine runs (the adapter's config ``plain``; the cost model prices it)."""

    ZERO_TAX = "zero_tax"  # one target decode forward; leaving PLAIN pays a catch-up
    WARM = "warm"  # SGLang's steps=0: the draft is kept warm at every step, no catch-up

    @classmethod
    def parse(cls, text: str) -> PlainVariant:
        """The variant `text` names ("zero-tax" is accepted for "zero_tax"); ValueError else."""
        try:
            return cls(_PLAIN_ALIASES.get(text, text))
        except ValueError:
            raise ValueError(f"plain must be one of {PLAIN_VARIANTS}, got {text!r}") from None

    @property
    def off_step(self) -> StepKind:
        """The step kind a PLAIN iteration of this variant measures as."""
        return StepKind.WARM if self is PlainVariant.WARM else StepKind.PLAIN


#: the variants' texts, for messages and command-line choices
PLAIN_VARIANTS: tuple[str, ...] = tuple(v.value for v in PlainVariant)
_PLAIN_ALIASES = {"zero-tax": PlainVariant.ZERO_TAX.value}


class ControlChange(TextEnum):
    """The outcome of a runtime control change (the ``control`` key of a specfsm.config line)."""

    APPLIED = "applied"
    REFUSED = "refused"
