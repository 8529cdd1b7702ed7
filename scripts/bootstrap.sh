#!/usr/bin/env bash
# Creates (once) the project's virtual environment in .venv: CPU torch, real sglang 0.5.23
# (--no-deps: its metadata pins a CUDA torch and GPU kernels), the pinned CPU dependency list,
# the project itself with its dev tools, and the test bed's own distribution (testbed/:
# specfsm-testbed, the CPU enablement, the test bed, the test channel, the demo; never part of
# the specfsm wheel). Idempotent: a stamp file records a finished build.
# Nothing here may pull a CUDA torch: every sglang dependency is installed with --no-deps.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="${SPECFSM_VENV:-$root/.venv}"
stamp="$venv/.specfsm-bootstrap"
want="$(cat "$root/pyproject.toml" "$root/requirements/"*.txt "$root/testbed/pyproject.toml" "$root/testbed/specfsm_cpu_boot.pth" "$0" | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
py="${PYTHON:-python3}"
echo "[bootstrap] building $venv (about 2 minutes on a fresh machine)" >&2
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" --no-deps -r "$root/requirements/sglang-cpu.txt"
"${pip[@]}" --no-deps -r "$root/requirements/sglang-extra.txt"
"${pip[@]}" --no-deps "sglang==0.5.23"
"${pip[@]}" -r "$root/requirements/dev.txt"
# The project (non-editable would hide edits; editable keeps tests on the working tree).
"${pip[@]}" --no-deps -e "$root"
"${pip[@]}" --no-deps -e "$root/testbed"
"$venv/bin/python" - <<'PY'
import torch, importlib.metadata as md
assert "+cu" not in torch.__version__ and not torch.version.cuda, f"CUDA torch pulled in: {torch.__version__}"
assert md.version("sglang") == "0.5.23", md.version("sglang")
PY
echo "$want" > "$stamp"
echo "[bootstrap] done" >&2
