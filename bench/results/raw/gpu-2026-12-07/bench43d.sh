#!/usr/bin/env bash
# Issue 43 on the 16-core box, this session's binary (zstd-1 shards): pack vs gigatoken at 1 and
# 16 threads on corpus $1 (code|prose) for the families $ONLY.
set -uo pipefail
c=${1:-code}; mb=${MB:-200}
if [ ! -d /tmp/site/awkward ]; then
  py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .dev/giga/gigatoken-*.whl .dev/giga/awkward-*.whl .dev/giga/awkward_cpp-*-$py-*.whl .dev/giga/fsspec-*.whl \
    .dev/giga/importlib_metadata-*.whl .dev/giga/zipp-*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
[ -x /tmp/dlm-data ] || { xz -dc .dev/bin/dlm-data.xz > /tmp/dlm-data && chmod +x /tmp/dlm-data; }
nproc; python3 --version; cat .dev/bin/COMMIT; lscpu | grep -E "Model name|L2"
DLM_SHARED_TOKENIZERS=.dev/tok python3 bench/tokenizers/bench.py /tmp/dlm-data /tmp/bt-$c --mb $mb --vs-giga \
  --threads 1,16 --repeat 2 --check 300 --corpus $c --only $ONLY 2>&1 | tee $OUT/vs-giga-$c.log
