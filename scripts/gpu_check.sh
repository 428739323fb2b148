#!/usr/bin/env bash
# The GPU check, for a CUDA or ROCm machine with torch and triton already installed and no network.
# Stages, in order (STAGES picks and orders them; default: all):
#   machine  versions, device, datasheet peak and measured copy bandwidth
#   tests    the test suite on the GPU
#   kernels  the Triton kernels compiled for this GPU's and the other targets: registers, spills, loads
#   tune     `perfsuite tune scenarios/tune.toml`: the tuned-plan table (tuned.json, tune.csv); the sweep
#            below then runs triton_auto with it (PERFSUITE_PLANS)
#   sweep    the compact sweep (scenarios/gpu_compact.toml) into CSV + HTML
#   summary  every variant per case, the Triton targets (summary.md)
#   draft    the draft loop, eager and graph-captured (scenarios/draft_quick.toml)
#   tp       tensor parallel, where more than one GPU is visible
# Usage: [STAGES="machine tests kernels tune"] scripts/gpu_check.sh [OUT_DIR]
#        (default OUT_DIR: $OUT if set, else reports/gpu-check). Every stage writes "-- stage: exit N, S s"
#        to OUT_DIR/stages.txt. Not yet timed on a GPU; estimated 15-20 minutes for all stages on an H200,
#        so under a 10-minute command limit run "machine tests kernels tune" and then "sweep summary draft tp"
#        into the same OUT_DIR (the second call picks up tuned.json).
# Pure-Python dependencies the machine lacks (plotly, jinja2, tqdm, ...) are taken from .whl/ when present:
# fetch them beforehand on a machine with network access with scripts/fetch_wheels.sh.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-reports/gpu-check}}
STAGES=${STAGES:-machine tests kernels tune sweep summary draft tp}
SCENARIO=${SCENARIO:-scenarios/gpu_compact.toml}  # override to dry-run the script elsewhere
TUNE_SCENARIO=${TUNE_SCENARIO:-scenarios/tune.toml}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
status=0

if ! "$PY" -c "import plotly, jinja2, tqdm" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/perfsuite-site .whl/*.whl \
      && export PYTHONPATH="/tmp/perfsuite-site:$PYTHONPATH"
  else
    echo "missing plotly/jinja2/tqdm and no .whl/ folder: run scripts/fetch_wheels.sh where pip has network" >&2
  fi
fi
# a tuned table from an earlier "tune" stage (this call or a previous one) drives triton_auto
[ -f "$OUT_DIR/tuned.json" ] && export PERFSUITE_PLANS="$OUT_DIR/tuned.json"

stage_machine() {
  { nvidia-smi -L 2>/dev/null || rocm-smi --showproductname 2>/dev/null || true; } | tee "$OUT_DIR/machine.txt"
  "$PY" - <<'PY' | tee -a "$OUT_DIR/machine.txt"
import torch, triton
from perfsuite import device, memory
info = device.detect()
print(f"torch {torch.__version__}, triton {triton.__version__}, {info.runtime}, device {info.name} "
      f"({info.arch}), backend {info.backend}")
print(f"datasheet peak {info.peak_gbps} GB/s, measured copy {memory.copy_gbps(info.device):.0f} GB/s")
PY
}

stage_tests() {
  timeout 420 "$PY" -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT_DIR/pytest.log" | tail -n 25
  return "${PIPESTATUS[0]}"
}

stage_kernels() {
  # this GPU's own architecture joins the default targets when the report knows it
  local arch known targets=(--target sm_90 --target gfx942)
  arch=$("$PY" -c "from perfsuite import device; print(device.detect().arch.split(':')[0])" 2>/dev/null)
  known=$("$PY" -c "from perfsuite.kernels.resources import TARGETS; print(' '.join(TARGETS))" 2>/dev/null)
  case " $known " in *" $arch "*) targets+=(--target "$arch") ;; esac
  timeout 300 "$PY" -m perfsuite kernels "$SCENARIO" "${targets[@]}" \
    --csv "$OUT_DIR/kernels.csv" --asm "$OUT_DIR/asm" 2>&1 | tee "$OUT_DIR/kernels.txt" | head -n 40
  return "${PIPESTATUS[0]}"
}

stage_tune() {
  timeout 540 "$PY" -m perfsuite tune "$TUNE_SCENARIO" --out "$OUT_DIR/tuned.json" --csv "$OUT_DIR/tune.csv" \
    2>&1 | tee "$OUT_DIR/tune.txt" | tail -n 90
  local rc=${PIPESTATUS[0]}
  [ -f "$OUT_DIR/tuned.json" ] && export PERFSUITE_PLANS="$OUT_DIR/tuned.json"
  return "$rc"
}

stage_sweep() {
  timeout 900 "$PY" -m perfsuite run "$SCENARIO" --out "$OUT_DIR" --no-progress 2>&1 | tail -n 15
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 1 ] && return 0  # 1: a parity failure, written into the results and the report
  return "$rc"
}

stage_summary() {
  "$PY" -m perfsuite.report.summary "$OUT_DIR/results.csv" --out "$OUT_DIR/summary.md" | head -n 80
}

stage_draft() {
  timeout 300 "$PY" -m perfsuite run scenarios/draft_quick.toml --out "$OUT_DIR/draft" --no-progress \
    2>&1 | tail -n 8
}

stage_tp() {
  local gpus
  gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
  if [ "${gpus:-0}" -gt 1 ]; then
    timeout 240 "$PY" -m pytest -q -p no:cacheprovider tests/test_distributed.py -k nccl 2>&1 | tail -n 3
    # tp sizes above the visible GPU count become skipped rows with the reason
    timeout 600 "$PY" -m perfsuite run scenarios/tp_models.toml --out "$OUT_DIR/tp" --no-progress 2>&1 | tail -n 8
  else
    echo "skipped: ${gpus:-0} GPU visible; tensor parallel needs at least 2 (one per rank)" \
      | tee "$OUT_DIR/tp-skipped.txt"
  fi
}

for stage in $STAGES; do
  if ! declare -F "stage_$stage" >/dev/null; then
    echo "unknown stage $stage (known: machine tests kernels tune sweep summary draft tp)" >&2
    exit 2
  fi
  echo "== $stage"
  started=$SECONDS
  "stage_$stage"
  rc=$?
  echo "-- $stage: exit $rc, $((SECONDS - started)) s" | tee -a "$OUT_DIR/stages.txt"
  [ "$rc" -ne 0 ] && status=1
done
echo "files in $OUT_DIR"
exit $status
