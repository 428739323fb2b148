#!/bin/bash
# scripts/slurm/submit.sh SCENARIO OUT N [LABEL]: N array tasks (one shard each) and a merge job that runs
# after all of them (afterany: a failed or cancelled task does not block the merge; resubmit it and merge
# again, see sweep.sbatch). Prints the two job ids. Extra sbatch options: SBATCH_ARGS="--gres=gpu:1 ...".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scenario=$1 out=$2 n=$3 label=${4:-}
# shellcheck disable=SC2086  # SBATCH_ARGS is a word list
array=$(sbatch --parsable ${SBATCH_ARGS:-} --array="0-$((n - 1))" "$here/sweep.sbatch" "$scenario" "$out" $label)
merge=$(sbatch --parsable --dependency="afterany:$array" "$here/merge.sbatch" "$out")
echo "$array $merge"
