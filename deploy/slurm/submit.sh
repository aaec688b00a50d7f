#!/usr/bin/env bash
# The whole chain on a cluster: fetch → pack → merge on CPU nodes, distill → merge on GPU nodes,
# each step gated with --dependency=afterok on the previous.
#   deploy/slurm/submit.sh manifests/stage1.toml TOKENIZER OUT  [TEACHER prompts.jsonl distilled.json]
# Array sizes: FETCH_TASKS (8), PACK_TASKS (32), DISTILL_TASKS (16).
set -euo pipefail
here=$(dirname "$0")
MANIFEST=${1:?manifest}; TOKENIZER=${2:?tokenizer}; OUT=${3:?out}
mkdir -p logs
f=$(sbatch --parsable --array=0-$(( ${FETCH_TASKS:-8} - 1 )) "$here/fetch.sbatch" "$MANIFEST")
fm=$(sbatch --parsable --dependency=afterok:$f --wrap "${DLM_DATA:-dlm-data} merge $MANIFEST --json && ${DLM_DATA:-dlm-data} fetch --manifest $MANIFEST" --job-name=dlm-fetch-merge -o "logs/%x-%j.out")
p=$(sbatch --parsable --dependency=afterok:$fm --array=0-$(( ${PACK_TASKS:-32} - 1 )) "$here/pack.sbatch" "$MANIFEST" "$TOKENIZER" "$OUT")
pm=$(sbatch --parsable --dependency=afterok:$p "$here/merge.sbatch" "$OUT")
echo "fetch $f, fetch-merge $fm, pack $p, pack-merge $pm"
if [ $# -ge 6 ]; then
  d=$(sbatch --parsable --array=0-$(( ${DISTILL_TASKS:-16} - 1 )) "$here/distill.sbatch" "$4" "$5" "$6")
  dm=$(sbatch --parsable --dependency=afterok:$d "$here/merge.sbatch" "$6")
  echo "distill $d, distill-merge $dm"
fi
