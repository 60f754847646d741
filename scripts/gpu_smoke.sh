#!/usr/bin/env bash
# GPU smoke test: gpuadvisor's node agent against the real NVML, idle and then under a short
# PyTorch matrix-multiply load; writes a report into OUT_DIR. Runs in under 5 minutes.
#
#   scripts/gpu_smoke.sh OUT_DIR
#
# For a machine with an NVIDIA GPU and no network: Python, nvidia-ml-py, aiohttp,
# prometheus-client, pyyaml and PyTorch may already be installed; anything else travels as
# wheels in .whl/ at the repository root (installed here into a private folder, no index).
# The agent imports bcrypt (for --web.config.file) as well; for a machine of Python 3.12 on
# x86-64, fetched where pip can reach PyPI:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 -d .whl bcrypt==5.0.0 nvidia-ml-py==13.615.71
set -euo pipefail
out=${1:?usage: scripts/gpu_smoke.sh OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
mkdir -p "$out"
if compgen -G "$root/.whl/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/gpuadvisor-site \
        "$root"/.whl/*.whl
    export PYTHONPATH=/tmp/gpuadvisor-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$root${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
{ nvidia-smi -L || true; "$python" --version; } >"$out/environment.txt" 2>&1
exec timeout 280 "$python" "$root/scripts/gpu_smoke.py" "$out" "${@:2}"
