#!/usr/bin/env bash
# Issue 43 on the 16-core box: pack (this session's binary) vs gigatoken at 1 and 16 threads on
# corpus $1 (code|prose), every fast-path family; then the in-process tokenizer-core A/B
# (examples/tokenize_bench, base = main 51b3697 vs new) on 30 MB of the same corpus.
set -uo pipefail
c=${1:-code}; mb=${MB:-300}
if [ ! -d /tmp/site/awkward ]; then
  py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .dev/giga/gigatoken-*.whl .dev/giga/awkward-*.whl .dev/giga/awkward_cpp-*-$py-*.whl .dev/giga/fsspec-*.whl \
    .dev/giga/importlib_metadata-*.whl .dev/giga/zipp-*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
for b in dlm-data dlm-base tb-base tb-new; do [ -x /tmp/$b ] || { xz -dc .dev/bin/$b.xz > /tmp/$b && chmod +x /tmp/$b; }; done
nproc; python3 --version; cat .dev/bin/COMMIT; lscpu | grep -E "Model name|L2"
DLM_SHARED_TOKENIZERS=.dev/tok python3 bench/tokenizers/bench.py /tmp/dlm-data /tmp/bt-$c --mb $mb --vs-giga \
  --threads 1,16 --repeat 2 --check 300 --corpus $c \
  --only ${ONLY:-llama3-shaped,qwen2-shaped,o200k-shaped,deepseek3-shaped,minicpm5-shaped,phi-2,mistral-7b-v0.1,phi-3-mini} 2>&1 | tee $OUT/vs-giga-$c.log
corpus=/tmp/bt-$c/corpus-${mb}mb.parquet; [ $c = code ] && corpus=/tmp/bt-$c/code-corpus-${mb}mb.parquet
python3 - "$corpus" /tmp/$c-30.bin <<'PY'
import pyarrow.parquet as pq, struct, sys
out = open(sys.argv[2], "wb"); n = 0
for s in pq.read_table(sys.argv[1], columns=["text"]).column(0).to_pylist():
    b = s.encode(); out.write(struct.pack("<I", len(b))); out.write(b); n += len(b)
    if n > 30e6: break
PY
for f in llama3-shaped qwen2-shaped o200k-shaped; do for r in 1 2; do for b in tb-base tb-new; do
  echo "core $c $f $b $(/tmp/$b /tmp/bt-$c/tok/$f/tokenizer.json /tmp/$c-30.bin 6 | tr '\n' ' ')"
done; done; done 2>&1 | tee $OUT/core-ab-$c.log
