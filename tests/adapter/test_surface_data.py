"""compat's supported versions against the hook surface measured from each SGLang wheel
(adapters/specfsm_sglang/surfaces/, written by scripts/sglang_surfaces.py; no network here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("specfsm_sglang")
from specfsm_sglang import compat

DATA = Path(compat.__file__).parent / "surfaces"
RELEASES = [f"0.5.{n}" for n in range(17, 24)]


def _load(version: str) -> dict[str, dict[str, object]]:
    data = json.loads((DATA / f"{version}.json").read_text())
    assert data["version"] == version
    return data["targets"]  # type: ignore[no-any-return]


def _params(signature: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in signature.strip("()").split(",") if p.strip())


@pytest.mark.parametrize("version", RELEASES)
def test_every_release_measured_and_compatible(version: str) -> None:
    """Every release 0.5.17-0.5.23 has its data, every target of its surface exists there and
    starts with the parameters the hooks read, and it is in SURFACES."""
    targets = _load(version)
    surface = compat.SURFACES[version]
    assert set(targets) == set(compat.hook_targets(surface)) == set(compat.HOOK_PARAMS)
    for name, target in compat.hook_targets(surface).items():
        got = targets[name]
        assert got["target"] == target, (version, name)
        found = got["found"]
        assert isinstance(found, dict), f"{version}: {target} not found"
        want = compat.HOOK_PARAMS[name]
        assert _params(str(found["signature"]))[: len(want)] == want, (version, name, found)


def test_supported_versions_are_the_measured_ones() -> None:
    """SURFACES lists exactly the measured releases; the two run end to end are verified."""
    assert sorted(compat.SURFACES) == sorted(p.stem for p in DATA.glob("*.json")) == RELEASES
    assert {v for v, s in compat.SURFACES.items() if s.verified} == {"0.5.17", "0.5.23"}
    assert next(iter(compat.SURFACES)) == "0.5.23"  # surface_or_newest's fallback
