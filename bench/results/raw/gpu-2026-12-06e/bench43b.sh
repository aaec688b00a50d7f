#!/usr/bin/env bash
# Issue 43 on the 16-core box after t3 (prefault) + t4 (DeepSeek-V3 scanner): pack vs gigatoken
# at 1 and 16 threads on corpus $1, then an A/B of the base binary (main 7f69beb) vs this one.
set -uo pipefail
c=${1:-code}; mb=${MB:-300}
if [ ! -d /tmp/site/gigatoken ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/giga/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for b in data base; do [ -x /tmp/dlm-$b ] || { xz -dc .dev/bin/dlm-$b.xz > /tmp/dlm-$b && chmod +x /tmp/dlm-$b; }; done
nproc; python3 --version; cat .dev/bin/COMMIT
DLM_SHARED_TOKENIZERS=.dev/tok python3 bench/tokenizers/bench.py /tmp/dlm-data /tmp/bt-$c --mb $mb --vs-giga \
  --threads 1,16 --repeat 2 --check 300 --corpus $c \
  --only ${ONLY:-llama3-shaped,qwen2-shaped,o200k-shaped,deepseek3-shaped,phi-2,mistral-7b-v0.1,phi-3-mini} 2>&1 | tee $OUT/vs-giga-$c.log
corpus=/tmp/bt-$c/corpus-${mb}mb.parquet; [ $c = code ] && corpus=/tmp/bt-$c/code-corpus-${mb}mb.parquet
ls -la $corpus
FAMS="/tmp/bt-$c/tok/llama3-shaped/tokenizer.json /tmp/bt-$c/tok/o200k-shaped/tokenizer.json /tmp/bt-$c/tok/deepseek3-shaped/tokenizer.json .dev/tok/phi-2/tokenizer.json" \
  DLM_SHARED_TOKENIZERS=.dev/tok bash bench/pack/ab.sh /tmp/dlm-base /tmp/dlm-data $corpus "1" 2 2>&1 | tee $OUT/ab-$c.log
