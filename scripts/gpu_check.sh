#!/usr/bin/env bash
# The GPU check in one command: scripts/gpu_check.sh [OUT_DIR]   (default: $OUT, else reports/gpu-check)
#
# For a CUDA or ROCm machine with torch and triton installed, no network and no plotly needed. It runs its
# stages in a scratch folder, each under its own time budget, all under BUDGET_S (480 s: one command of at
# most 8 minutes), then packs everything into at most 8 files directly in OUT_DIR, each under MAX_BYTES
# (15 MiB), names of letters, digits, '.', '_', '-':
#   summary.md   the machine, the sweep's summary (opening with the cost of exactness: the exact kernel
#                over the Triton argmax and full_softmax) with the tuned plans, the stages (status, exit,
#                seconds, budget), the draft loop, the battery, the tests, what was left out of the pack
#   results.csv  report.html   the sweep's rows and its report
#   tuned.json   tune.csv      the tuned-plan table (triton_auto's plans in the sweep) and every candidate
#   kernels.csv  draft.csv     the compile report for this GPU's architecture; the draft loop's rows
#   logs.tar.gz  the scratch folder: every stage's log, the asm, results.jsonl/json, edge_cases.csv, the
#                draft report, junit.xml (asm, then html and jsonl, are left out if it would be too big)
# A stage that overruns its budget gets SIGINT (`timeout -s INT`), which every perfsuite command turns into
# "write what was measured, exit 130", and SIGKILL GRACE_S later; the pack runs whatever happens (a trap),
# also when this script gets SIGINT or SIGTERM (the running stage is stopped first; exit status 130).
#
# Stages, in this order (STAGES picks and orders them). Budget in seconds (env <STAGE>_S, e.g. SWEEP_S=200)
# and an ESTIMATE of its time on an H200 (not yet timed on one). Triton compiles about 1.8 s of CPU per
# kernel key (reports/kernels-static/); "cold" is the keys a stage compiled itself before the compile
# plan (warm then held the tune candidates and the sweep's heuristic kernels only), "now" with it (the
# counts: tests/test_kernel_warm.py::test_the_stages_compile_plans_on_the_h200, heuristic plans):
#   machine   30 s   est. 15 s   versions, device, datasheet peak and measured copy bandwidth (a cold
#                                import of torch and triton, CUDA initialisation, the copy test)
#   warm      60 s   est. 35 s   the compile plan, one worker per core (`perfsuite warm`): every
#                                kernel key a later stage launches, 244 (was 195): the tune candidates
#                                (105), the sweep (33) and its edge-case matrix (12), the draft cases (11),
#                                the battery's Triton --quick cases (130); distinct 244 x 1.8 s / 16 cores
#                                + the workers' start
#   kernels   25 s   est. 15 s   `perfsuite kernels` for this GPU's architecture only: registers, spills,
#                                occupancy, load width (KERNEL_TARGETS="sm_90 gfx942" to choose)
#   tune      50 s   est. 45 s   `perfsuite tune scenarios/tune.toml`: 12 shapes x ~30 plans -> tuned.json;
#                                cold 0, now 0
#   rewarm    20 s   est. 10 s   the same plan with the tuned table: only tuned plans that differ from the
#                                heuristic ones compile (0 to 85: triton_auto's keys in the sweep 20, the
#                                draft 11, the battery 54)
#   sweep    130 s   est. 124 s  `perfsuite run scenarios/gpu_check.toml`: 648 cases, triton_auto tuned;
#                                cold 6 (the edge-case matrix) + the tuned plans, now 0
#   summary   15 s   est. 8 s    `perfsuite summary`: medians, speedups, targets, plans
#   draft     35 s   est. 28 s   `perfsuite run scenarios/draft_gpu.toml`: 34 draft cycles, eager and graph;
#                                cold 5, now 0
#   check     25 s   est. 15 s   `perfsuite check --quick`, the conformance battery with graph capture and the
#                                quick batch axis: the torch-op variants (CHECK_TORCH, at most a third of the
#                                budget), then the Triton ones (CHECK_TRITON); CHECK_ARGS adds arguments (the
#                                warm stages pass them on); cold 71 (about 128 s), now 0
#   tests     55 s   est. 40 s   the GPU tests (TESTS), the Triton file first, in TEST_JOBS pytest-xdist
#                                workers (one per core; one process without xdist): their own odd tiles,
#                                splits, k 16, fp16 and shifts, 149 keys no stage launches (161 in all),
#                                cold in one process (about 270 s), now over 16 workers (about 17 s each)
#   tp        60 s   only with more than one GPU: NCCL tests and scenarios/tp_models.toml
# Budgets 445 s + GRACE_S 20 + PACK_S 15 = 480 s <= BUDGET_S; estimates about 335 s. A stage starts with at
# most what is left of BUDGET_S (less GRACE_S and PACK_S) and is not run when under 3 s are left.
# Overrides: SCENARIO, TUNE_SCENARIO, DRAFT_SCENARIO, TP_SCENARIO, TESTS (pytest arguments), TEST_JOBS,
# PYTHON, KERNEL_TARGETS, MAX_BYTES; KEEP_WORK=1 keeps the scratch folder. With PERFSUITE_LAUNCH_LOG set,
# every Triton launch is logged with its stage (perfsuite.kernels.launch_log: the compile plan's proof).
# A second call into the same OUT_DIR continues from its logs.tar.gz (STAGES="machine warm kernels tune",
# then STAGES="sweep summary draft tests": the sweep uses the first call's tuned.json).
# Exit status: 0 every stage finished (or had nothing to do here), 1 a stage failed, found a problem
# (parity, spills, failing tests), was stopped at its budget or not run for lack of time, 2 bad input
# (unknown stage, bad number, OUT_DIR holding other files), 130 interrupted.
# Optional: plotly, jinja2 and tqdm from .whl/ (scripts/fetch_wheels.sh, where pip has network).
# shellcheck disable=SC2329  # the stages and helpers are called by name ("stage_$stage") and from traps
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

ALL_STAGES="machine warm kernels tune rewarm sweep summary draft check tests tp"
OUT_DIR=${1:-${OUT:-reports/gpu-check}}
STAGES=${STAGES:-$ALL_STAGES}
SCENARIO=${SCENARIO:-scenarios/gpu_check.toml}
TUNE_SCENARIO=${TUNE_SCENARIO:-scenarios/tune.toml}
DRAFT_SCENARIO=${DRAFT_SCENARIO:-scenarios/draft_gpu.toml}
TP_SCENARIO=${TP_SCENARIO:-scenarios/tp_models.toml}
TESTS=${TESTS:-tests/test_triton_variants.py tests/test_tuning.py tests/test_gpu.py tests/test_draft_gpu.py}
TEST_JOBS=${TEST_JOBS:-$(nproc)}  # pytest-xdist workers for the tests stage (where xdist is installed)
BUDGET_S=${BUDGET_S:-480}
GRACE_S=${GRACE_S:-20}  # from a stage's SIGINT to its SIGKILL: time to write what it measured
PACK_S=${PACK_S:-15}    # kept for the pack
MACHINE_S=${MACHINE_S:-30} WARM_S=${WARM_S:-60} KERNELS_S=${KERNELS_S:-25} TUNE_S=${TUNE_S:-50}
REWARM_S=${REWARM_S:-20} SWEEP_S=${SWEEP_S:-130} SUMMARY_S=${SUMMARY_S:-15} DRAFT_S=${DRAFT_S:-35}
CHECK_S=${CHECK_S:-25} TESTS_S=${TESTS_S:-55}
CHECK_TORCH=${CHECK_TORCH:-full_softmax argmax_ones identity identity_engine_order}
CHECK_TRITON=${CHECK_TRITON:-triton_auto triton_fused triton_split triton_argmax}
CHECK_ARGS=${CHECK_ARGS:-}
TP_S=${TP_S:-60}
MAX_BYTES=${MAX_BYTES:-$((15 * 1024 * 1024))}
MIN_STAGE_S=3
PY=${PYTHON:-python3}
# what the pack may leave in OUT_DIR (at most 8 of them at once); *.gz: a file too big, compressed
PACKED="summary.md results.csv report.html tuned.json tune.csv kernels.csv draft.csv logs.tar.gz"

fail() { echo "gpu_check: $*" >&2; exit 2; }
for stage in $STAGES; do
  case " $ALL_STAGES " in *" $stage "*) ;; *) fail "unknown stage $stage (known: $ALL_STAGES)" ;; esac
done
for name in BUDGET_S GRACE_S PACK_S MACHINE_S WARM_S KERNELS_S TUNE_S REWARM_S SWEEP_S SUMMARY_S DRAFT_S \
  CHECK_S TESTS_S TP_S TEST_JOBS MAX_BYTES; do
  [[ ${!name} =~ ^[0-9]+$ ]] || fail "$name must be a whole number of seconds (bytes), got '${!name}'"
done
packed_name() {  # is $1 a name the pack writes (itself, or gzipped)?
  case " $PACKED " in *" $1 "* | *" ${1%.gz} "*) return 0 ;; esac
  return 1
}
if [ -d "$OUT_DIR" ]; then
  for path in "$OUT_DIR"/* "$OUT_DIR"/.[!.]*; do
    [ -e "$path" ] || continue
    packed_name "$(basename "$path")" && [ -f "$path" ] && continue
    fail "$OUT_DIR holds $(basename "$path"), which this check did not write: give it an empty folder"
  done
fi
mkdir -p "$OUT_DIR" || fail "cannot create $OUT_DIR"

T0=$(date +%s)
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX") || fail "cannot create a scratch folder"
WORK=$SCRATCH/work       # what logs.tar.gz holds
PACK=$SCRATCH/pack       # the files on their way to OUT_DIR
RUNNING=$SCRATCH/running # the stage's timeout processes, for a signal to this script
NOTE=$SCRATCH/note       # a stage's status in place of "ok" (skipped, and why)
STOPPED=$SCRATCH/stopped # there once this script is interrupted
WARMED=$SCRATCH/warmed-keys.jsonl # the kernel keys warmed in this call (Triton's cache is this machine's)
mkdir -p "$WORK/logs" "$PACK"
touch "$WORK/stages.tsv"
if [ -f "$OUT_DIR/logs.tar.gz" ]; then
  tar -xzf "$OUT_DIR/logs.tar.gz" -C "$WORK" && echo "continuing from $OUT_DIR/logs.tar.gz"
fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PERFSUITE_DEBUG=1  # an internal error's traceback goes into the stage's log, which is packed
if ! "$PY" -c "import plotly, jinja2, tqdm" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SCRATCH/site" .whl/*.whl \
    && export PYTHONPATH="$SCRATCH/site:$PYTHONPATH"
fi

# ---- helpers a stage uses ----
left() {  # seconds left to the running stage (at least 1)
  local now
  now=$(date +%s)
  echo $((STAGE_END > now ? STAGE_END - now : 1))
}
within() {  # within SECONDS CMD...: CMD, sent SIGINT after min(SECONDS, what the stage has left)
  local limit
  [ -e "$STOPPED" ] && return 130  # this script was interrupted: nothing more starts
  limit=$(left)
  [ "$1" -lt "$limit" ] && limit=$1
  [ "$limit" -lt 1 ] && limit=1  # timeout 0 would mean no limit
  shift
  timeout -s INT -k "$GRACE_S" "$limit" "$@" &
  echo "$!" >"$RUNNING"  # one command at a time
  wait "$!"
  local rc=$?
  : >"$RUNNING"
  return "$rc"
}
limited() { within "$(left)" "$@"; }  # CMD under what the stage has left
note() { echo "$*" | tee "$NOTE"; }  # the stage's status when it exits 0, in place of "ok"
skip() { note "skipped: $*"; }       # the stage has nothing to do here, and why

# ---- the stages: each runs in the background, its output in WORK/logs/<stage>.log ----
stage_machine() {
  # every command that could block runs under a limit: a stage never outlives its budget
  within 15 nvidia-smi 2>&1 || within 15 rocm-smi --showproductname --showdriverversion 2>&1 \
    || echo "no nvidia-smi or rocm-smi answered"
  echo "host $(uname -n), $(nproc) CPUs, $(uname -sr)"
  limited "$PY" -c '
import torch
from perfsuite.measure import device, environment
try:
    import triton
    triton_version = triton.__version__
except ImportError:
    triton_version = "not installed"
info = device.detect()
print(f"torch {torch.__version__}, triton {triton_version}, {info.runtime}, device {info.name} "
      f"({info.arch or info.backend}), backend {info.backend}")
copy = environment.copy_columns(info)  # after the warm-up copies, clocks read under them
gbps, sm, mem, warmup = (copy[name] for name in ("copy_gbps", "copy_sm_mhz", "copy_mem_mhz", "copy_warmup_s"))
print(f"datasheet peak {info.peak_gbps} GB/s, measured copy {gbps:.0f} GB/s "
      f"(SM {sm:.0f} MHz, memory {mem:.0f} MHz, after {warmup:.2f} s of copies)")
print(f"visible GPUs: {torch.cuda.device_count()}")
arch = info.arch.split(":")[0] or "none"
print(f"architecture: {arch}")
'
}

fact() {  # fact NAME PYTHON: the machine stage's "NAME: value" line, else PYTHON's answer (a cold start)
  local found
  found=$(sed -n "s/^$1: //p" "$WORK/logs/machine.log" 2>/dev/null | tail -n 1)
  [ -n "$found" ] || found=$(within 60 "$PY" -c "$2" 2>/dev/null)
  echo "$found"
}

warm_args() {  # the warm command's arguments for what the later stages launch (see stage_warm)
  local selector
  WARM_ARGS=(--candidates "$TUNE_SCENARIO" "$SCENARIO" "$DRAFT_SCENARIO")
  for selector in $CHECK_TRITON; do WARM_ARGS+=(--check "$selector"); done
  # shellcheck disable=SC2206  # CHECK_ARGS is a word list (the battery's --case, --dtype, --device)
  WARM_ARGS+=(--quick $CHECK_ARGS --keys "$WARMED" --jobs "$(nproc)")
}

warm_for_later() {  # the compile plan of every later stage, in parallel, within what the stage has left
  local budget rc
  if [ ! -f perfsuite/tools/warm.py ]; then
    skip "perfsuite/tools/warm.py is not in this checkout"
    return 0
  fi
  budget=$(left)
  warm_args
  within "$budget" "$PY" -m perfsuite warm "${WARM_ARGS[@]}" \
    --budget "$((budget > 6 ? budget - 3 : budget))"
  rc=$?
  case $rc in
    0) return 0 ;;
    124) note "ok, partly: the budget ran out (the rest compiles when first used)" ;;  # not a failure
    *) return "$rc" ;;
  esac
}

stage_warm() {
  # every kernel key a later stage launches, one worker per core: the tune candidates first, then the
  # sweep's cases and its edge-case matrix, the draft cases, the battery's Triton cases (--quick)
  warm_for_later
}

stage_rewarm() {
  # the same plan again with the tuned table that tune just wrote (PERFSUITE_PLANS): only the keys of
  # tuned plans that differ from the heuristic ones are new (--keys leaves out what warm did)
  if [ ! -f "$WORK/tune/tuned.json" ]; then
    skip "no tuned.json: the tune stage has not run (the warm stage's kernels stand)"
    return 0
  fi
  warm_for_later
}

stage_kernels() {
  local targets=${KERNEL_TARGETS:-} args=() target known
  if [ -z "$targets" ]; then  # this GPU's architecture, if the compile report knows it
    targets=$(fact architecture "from perfsuite.measure import device; print(device.detect().arch.split(':')[0])")
    known=$(within 60 "$PY" -c "from perfsuite.kernels.resources import TARGETS; print(' '.join(TARGETS))")
    case " $known " in *" $targets "*) ;; *) targets="" ;; esac
  fi
  if [ -z "$targets" ]; then
    targets=sm_90
    echo "no GPU architecture the compile report knows here: compiling for sm_90 (H100, H200)"
  fi
  for target in $targets; do args+=(--target "$target"); done
  mkdir -p "$WORK/kernels"
  # Triton's own compiler for the target, no GPU needed: never the simulated GPU's interpreter
  PERFSUITE_SIMULATED_GPU="" limited "$PY" -m perfsuite kernels "$SCENARIO" "${args[@]}" \
    --csv "$WORK/kernels/kernels.csv" --asm "$WORK/kernels/asm"
}

stage_tune() {
  mkdir -p "$WORK/tune"
  limited "$PY" -m perfsuite tune "$TUNE_SCENARIO" --out "$WORK/tune/tuned.json" --csv "$WORK/tune/tune.csv"
}

stage_sweep() {
  limited "$PY" -m perfsuite run "$SCENARIO" --out "$WORK/sweep" --no-progress
}

stage_summary() {
  local tuned=()
  if [ ! -f "$WORK/sweep/results.csv" ]; then
    skip "no results.csv: the sweep has not run"
    return 0
  fi
  [ -f "$WORK/tune/tuned.json" ] && tuned=(--tuned "$WORK/tune/tuned.json")
  mkdir -p "$WORK/summary"
  limited "$PY" -m perfsuite summary "$WORK/sweep/results.csv" "${tuned[@]}" \
    --out "$WORK/summary/summary.md" --csv "$WORK/summary/results.csv"
}

stage_draft() {
  limited "$PY" -m perfsuite run "$DRAFT_SCENARIO" --out "$WORK/draft" --no-progress
}

stage_check() {
  local rc=0 rc_triton=0
  mkdir -p "$WORK/check"
  # shellcheck disable=SC2086  # the selector lists and CHECK_ARGS are word lists
  # --quick: the full battery's batch axis (30 sizes up to 4096 rows) took 14-28 s a selector on a CPU
  within "$(($(left) / 3))" "$PY" -m perfsuite check $CHECK_TORCH --quick $CHECK_ARGS --csv "$WORK/check/torch.csv" \
    || rc=$?
  # the Triton kernels' first calls compile: the quick subset, with what is left
  # shellcheck disable=SC2086
  limited "$PY" -m perfsuite check $CHECK_TRITON --quick $CHECK_ARGS --csv "$WORK/check/triton.csv" \
    || rc_triton=$?
  [ "$rc" -ne 0 ] && return "$rc"
  return "$rc_triton"
}

stage_tests() {
  mkdir -p "$WORK/tests"
  unset PERFSUITE_PLANS  # the tests expect the heuristic plans unless they install a table themselves
  local parallel=()
  # the tests' kernels (odd tiles, k 16, fp16, shifts: not the stages' keys) compile in parallel workers,
  # the Triton file first; one process where pytest-xdist is not installed
  if [ "$TEST_JOBS" -gt 1 ] && "$PY" -c "import xdist" 2>/dev/null; then
    parallel=(-n "$TEST_JOBS")
  fi
  # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
  limited "$PY" -m pytest -q -p no:cacheprovider "${parallel[@]}" --junitxml "$WORK/tests/junit.xml" $TESTS
}

stage_tp() {
  local gpus rc=0
  gpus=$(fact "visible GPUs" "import torch; print(torch.cuda.device_count())")
  [[ $gpus =~ ^[0-9]+$ ]] || gpus=0
  if [ "$gpus" -le 1 ]; then
    skip "$gpus GPU visible; tensor parallel needs at least 2 (one per rank)"
    return 0
  fi
  within "$(($(left) / 3))" "$PY" -m pytest -q -p no:cacheprovider tests/test_distributed.py -k nccl || rc=$?
  # tp sizes above the visible GPU count become skipped rows with the reason
  limited "$PY" -m perfsuite run "$TP_SCENARIO" --out "$WORK/tp" --no-progress || rc=$?
  return "$rc"
}

# ---- running the stages ----
STAGE_PID="" INTERRUPTED=0 STATUS=0 PACKED_ONCE=0
on_signal() {  # SIGINT / SIGTERM to this script: stop the running stage (it writes what it has), then pack
  INTERRUPTED=1
  touch "$STOPPED"
  stop_running
}
stop_running() {  # SIGINT to the stage's command under `timeout` (which passes it on), if one is running
  local pid
  pid=$(cat "$RUNNING" 2>/dev/null)
  [ -n "$pid" ] && kill -INT "$pid" 2>/dev/null
}
wait_stopped() {  # until the stage's command has stopped (it is not this shell's child: poll)
  local pid tries=$((2 * GRACE_S + 10))
  pid=$(cat "$RUNNING" 2>/dev/null)
  while [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$tries" -gt 0 ]; do
    sleep 0.5
    tries=$((tries - 1))
  done
}
trap on_signal INT TERM
trap 'pack; exit "$STATUS"' EXIT
trap '' PIPE  # a closed stdout (`gpu_check.sh | head`) must not kill this script before its pack

budget_of() { local name="${1^^}_S"; echo "${!name}"; }

describe() {  # describe EXIT: a stage's status in words
  case $1 in
    0) if [ -s "$NOTE" ]; then head -n 1 "$NOTE"; else echo "ok"; fi ;;
    124) echo "stopped at its budget (SIGINT)" ;;
    137) echo "killed ${GRACE_S} s after SIGINT" ;;
    130) echo "interrupted" ;;
    1) echo "failed or found a problem (exit 1)" ;;
    *) echo "failed (exit $1)" ;;
  esac
}

run_stage() {  # run_stage NAME: in the background, so that a signal to this script reaches it at once
  local stage=$1 budget limit started rc
  budget=$(budget_of "$stage")
  limit=$((T0 + BUDGET_S - GRACE_S - PACK_S - $(date +%s)))
  [ "$budget" -lt "$limit" ] && limit=$budget
  if [ "$limit" -lt "$MIN_STAGE_S" ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$stage" "not run: the total budget is spent" - 0 "$budget" \
      >>"$WORK/stages.tsv"
    echo "-- $stage: not run, the total budget ($BUDGET_S s) is spent"
    STATUS=1
    return
  fi
  : >"$RUNNING"
  rm -f "$NOTE"
  [ -f "$WORK/tune/tuned.json" ] && export PERFSUITE_PLANS="$WORK/tune/tuned.json"
  echo "== $stage (budget $limit s)"
  started=$(date +%s)
  STAGE_END=$((started + limit))
  # the stage ignores SIGTERM sent to the whole process group: this shell passes it on as SIGINT
  (
    trap '' TERM
    export PERFSUITE_STAGE=$stage  # for a launch log (perfsuite.kernels.launch_log): which stage launched
    "stage_$stage"
  ) >"$WORK/logs/$stage.log" 2>&1 </dev/null &
  STAGE_PID=$!
  wait "$STAGE_PID"
  rc=$?
  while kill -0 "$STAGE_PID" 2>/dev/null; do  # a trapped signal ended `wait`: the stage is still writing
    wait "$STAGE_PID"
    rc=$?
  done
  STAGE_PID=""
  wait_stopped
  : >"$RUNNING"
  tail -n 6 "$WORK/logs/$stage.log" | sed 's/^/   /'
  printf '%s\t%s\t%s\t%s\t%s\n' "$stage" "$(describe "$rc")" "$rc" "$(($(date +%s) - started))" "$limit" \
    >>"$WORK/stages.tsv"
  echo "-- $stage: exit $rc, $(($(date +%s) - started)) s ($(describe "$rc"))"
  [ "$rc" -ne 0 ] && STATUS=1
}

# ---- the pack: at most 8 files in OUT_DIR, each under MAX_BYTES ----
size_of() { wc -c <"$1" | tr -d ' '; }

stage_table() {
  echo "| stage | status | exit | seconds | budget s |"
  echo "|---|---|---|---|---|"
  awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$WORK/stages.tsv"
}

take() {  # take SOURCE NAME: SOURCE into the pack as NAME (gzipped, or left out, when too big)
  local source=$1 name=$2
  [ -f "$source" ] || return 0
  if [ "$(size_of "$source")" -le "$MAX_BYTES" ]; then
    cp "$source" "$PACK/$name"
  elif gzip -c "$source" >"$PACK/$name.gz" && [ "$(size_of "$PACK/$name.gz")" -le "$MAX_BYTES" ]; then
    echo "- $name is over $MAX_BYTES bytes: packed as $name.gz" >>"$SCRATCH/notes"
  else
    rm -f "$PACK/$name.gz"
    echo "- $name ($(size_of "$source") bytes) is too big even gzipped: left out" >>"$SCRATCH/notes"
  fi
}

tar_logs() {  # logs.tar.gz of WORK: all of it, else without the asm, else without html and jsonl too
  local excludes=() round
  for round in everything "without kernels/asm" "without kernels/asm, html and jsonl"; do
    case $round in
      *asm) excludes+=(--exclude=./kernels/asm) ;;
      *jsonl) excludes+=(--exclude='*.html' --exclude='*.jsonl') ;;
    esac
    tar -czf "$PACK/logs.tar.gz" "${excludes[@]}" -C "$WORK" . 2>"$SCRATCH/tar.err"
    [ $? -gt 1 ] && echo "- logs.tar.gz: tar failed: $(head -c 300 "$SCRATCH/tar.err")" >>"$SCRATCH/notes"
    if [ "$(size_of "$PACK/logs.tar.gz")" -le "$MAX_BYTES" ]; then
      [ "$round" != everything ] \
        && echo "- logs.tar.gz over $MAX_BYTES bytes with everything: packed $round" >>"$SCRATCH/notes"
      return
    fi
  done
  rm -f "$PACK/logs.tar.gz"
  echo "- logs.tar.gz over $MAX_BYTES bytes even without asm, html and jsonl: left out" >>"$SCRATCH/notes"
}

section() {  # section TITLE FILE [LINES]: a fenced excerpt of FILE
  [ -s "$2" ] || return 0
  printf '\n## %s\n\n```text\n' "$1"
  tail -n "${3:-40}" "$2" | sed "s|$WORK/||g"  # paths as logs.tar.gz holds them
  printf '```\n'
}

compose_summary() {
  local total=$(($(date +%s) - T0))
  echo "# perfsuite GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), $total s of a $BUDGET_S s budget, exit status $STATUS."
  grep -h "^torch \|^datasheet " "$WORK/logs/machine.log" 2>/dev/null | sed 's/^/    /'
  if [ -s "$WORK/summary/summary.md" ]; then  # it opens with the cost of exactness
    printf '\n'
    cat "$WORK/summary/summary.md"
  fi
  printf '\n## Stages\n\n'
  stage_table
  if [ -s "$SCRATCH/notes" ]; then
    printf '\n## Packed differently or left out (each file at most %s bytes)\n\n' "$MAX_BYTES"
    cat "$SCRATCH/notes"
  fi
  [ -s "$WORK/summary/summary.md" ] || section "Sweep" "$WORK/logs/sweep.log" 12
  section "Draft loop" "$WORK/logs/draft.log" 12
  section "Conformance battery (perfsuite check)" "$WORK/logs/check.log" 40
  section "Tests" "$WORK/logs/tests.log" 25
  section "Kernels (this GPU's architecture)" "$WORK/logs/kernels.log" 40
  section "Machine" "$WORK/logs/machine.log" 60
  printf '\n## Files\n\n'
  echo "OUT_DIR holds at most 8 files; logs.tar.gz holds the scratch folder (logs/<stage>.log, sweep/,"
  echo "tune/, kernels/asm/, draft/, check/, tests/junit.xml, summary/)."
}

pack() {
  [ "$PACKED_ONCE" = 1 ] && return
  PACKED_ONCE=1
  trap '' INT TERM  # the pack finishes whatever comes
  touch "$STOPPED"  # a stage still running (this script interrupted) is stopped first
  stop_running
  [ -n "$STAGE_PID" ] && wait "$STAGE_PID" 2>/dev/null
  wait_stopped
  [ "$INTERRUPTED" = 1 ] && STATUS=130
  # the sweep's rows with the run's columns (device, versions; run.json) on every row, else as written
  if [ -s "$WORK/summary/results.csv" ]; then take "$WORK/summary/results.csv" results.csv
  else take "$WORK/sweep/results.csv" results.csv; fi
  take "$WORK/sweep/report.html" report.html
  take "$WORK/tune/tuned.json" tuned.json
  take "$WORK/tune/tune.csv" tune.csv
  take "$WORK/kernels/kernels.csv" kernels.csv
  take "$WORK/draft/draft.csv" draft.csv
  compose_summary >"$WORK/summary.md"
  tar_logs
  compose_summary >"$PACK/summary.md"  # again: with what the logs' pack left out
  [ "$(size_of "$PACK/summary.md")" -le "$MAX_BYTES" ] || truncate -s "$MAX_BYTES" "$PACK/summary.md"
  for path in "$OUT_DIR"/*; do  # the previous pack's files (a continued check), all replaced
    [ -f "$path" ] && packed_name "$(basename "$path")" && rm -f "$path"
  done
  mv "$PACK"/* "$OUT_DIR"/
  printf '\n'
  stage_table
  echo "total $(($(date +%s) - T0)) s of $BUDGET_S s; exit status $STATUS; in $OUT_DIR:"
  find "$OUT_DIR" -maxdepth 1 -type f -printf '%10s  %f\n' | sort -k 2
  [ -s "$SCRATCH/notes" ] && cat "$SCRATCH/notes"
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "scratch folder kept: $WORK"; else rm -rf "$SCRATCH"; fi
}

for stage in $STAGES; do
  [ "$INTERRUPTED" = 1 ] && break
  run_stage "$stage"
done
exit "$STATUS"
