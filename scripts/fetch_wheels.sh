#!/usr/bin/env bash
# Download the pure-Python wheels a GPU box without network may lack beside its preinstalled torch, triton,
# pytest, pytest-benchmark and pandas, into .whl/ (ignored by git). Run where pip can reach PyPI. Optional:
# scripts/gpu_check.sh installs them from .whl/ when present and runs without them (no plots without plotly).
# Usage: scripts/fetch_wheels.sh [PYTHON_VERSION]   (default 3.12)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-3.12}
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" \
  --implementation py --platform any -d .whl \
  plotly narwhals jinja2 tqdm
# MarkupSafe (a jinja2 dependency) has compiled wheels; its pure-Python fallback wheel is not published.
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl markupsafe
ls -la .whl
