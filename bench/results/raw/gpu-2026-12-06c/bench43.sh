#!/usr/bin/env bash
# Issue 43 on the 16-core box: pack vs gigatoken encode_files, 1 and 16 threads, one corpus ($1).
set -uo pipefail
c=${1:-code}; mb=${MB:-300}
if [ ! -d /tmp/site/gigatoken ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/giga/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
[ -x /tmp/dlm-data ] || { xz -dc .dev/bin/dlm-data.xz > /tmp/dlm-data && chmod +x /tmp/dlm-data; }
nproc; python3 --version
DLM_SHARED_TOKENIZERS=.dev/tok python3 bench/tokenizers/bench.py /tmp/dlm-data /tmp/bt-$c --mb $mb --vs-giga \
  --threads 1,16 --repeat 2 --check 300 --corpus $c \
  --only ${ONLY:-llama3-shaped,qwen2-shaped,o200k-shaped,phi-2,mistral-7b-v0.1,phi-3-mini} 2>&1 | tee $OUT/vs-giga-$c.log
