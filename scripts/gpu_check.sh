#!/usr/bin/env bash
# One short GPU check, for a CUDA or ROCm machine with torch and triton already installed and no network:
#   1. the machine and versions; 2. the test suite on the GPU; 3. the compact sweep (scenarios/gpu_compact.toml)
#   into CSV + HTML; 4. a summary table (every variant per case, Triton targets); 5. the draft loop, eager and
#   graph-captured (scenarios/draft_quick.toml); 6. tensor parallel, where more than one GPU is visible.
# Usage: scripts/gpu_check.sh [OUT_DIR]     (default: $OUT if set, else reports/gpu-check)
# Pure-Python dependencies the machine lacks (plotly, jinja2, tqdm, ...) are taken from .whl/ when present:
# fetch them beforehand on a machine with network access with scripts/fetch_wheels.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-reports/gpu-check}}
SCENARIO=${SCENARIO:-scenarios/gpu_compact.toml}  # override to dry-run the script elsewhere
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

if ! "$PY" -c "import plotly, jinja2, tqdm" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/perfsuite-site .whl/*.whl \
      && export PYTHONPATH="/tmp/perfsuite-site:$PYTHONPATH"
  else
    echo "missing plotly/jinja2/tqdm and no .whl/ folder: run scripts/fetch_wheels.sh where pip has network" >&2
  fi
fi

echo "== machine"
{ nvidia-smi -L 2>/dev/null || rocm-smi --showproductname 2>/dev/null || true; } | tee "$OUT_DIR/machine.txt"
"$PY" - <<'PY' | tee -a "$OUT_DIR/machine.txt"
import torch
from perfsuite import device, memory
info = device.detect()
print(f"torch {torch.__version__}, {info.runtime}, device {info.name} ({info.arch}), backend {info.backend}")
print(f"datasheet peak {info.peak_gbps} GB/s, measured copy {memory.copy_gbps(info.device):.0f} GB/s")
PY

echo "== tests on the GPU"
timeout 420 "$PY" -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT_DIR/pytest.log" | tail -n 25
tests_status=${PIPESTATUS[0]}

echo "== compact sweep"
timeout 900 "$PY" -m perfsuite run "$SCENARIO" --out "$OUT_DIR" --no-progress \
  2>&1 | tail -n 15
sweep_status=${PIPESTATUS[0]}

echo "== summary"
"$PY" -m perfsuite.report.summary "$OUT_DIR/results.csv" --out "$OUT_DIR/summary.md" | head -n 80

echo "== draft loop (eager and graph)"
timeout 300 "$PY" -m perfsuite run scenarios/draft_quick.toml --out "$OUT_DIR/draft" --no-progress 2>&1 | tail -n 8

echo "== tensor parallel (perfsuite.distributed)"
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${gpus:-0}" -gt 1 ]; then
  timeout 240 "$PY" -m pytest -q -p no:cacheprovider tests/test_distributed.py -k nccl 2>&1 | tail -n 3
  # tp sizes above the visible GPU count become skipped rows with the reason
  timeout 600 "$PY" -m perfsuite run scenarios/tp_models.toml --out "$OUT_DIR/tp" --no-progress 2>&1 | tail -n 8
else
  echo "skipped: ${gpus:-0} GPU visible; tensor parallel needs at least 2 (one per rank)" \
    | tee "$OUT_DIR/tp-skipped.txt"
fi

echo "tests exit $tests_status, sweep exit $sweep_status; files in $OUT_DIR"
exit $(( tests_status != 0 || (sweep_status != 0 && sweep_status != 1) ))
