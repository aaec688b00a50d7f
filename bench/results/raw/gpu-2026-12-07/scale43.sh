#!/usr/bin/env bash
# Issue 43 on the 16-core box: steady-state scaling 1 -> 16 threads (pack-scale.md method, 4 GB
# code-and-docs corpus) with gigatoken beside it and a one-core pinned baseline.
set -uo pipefail
mb=${MB:-4096}
if [ ! -d /tmp/site/awkward ]; then
  py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .dev/giga/gigatoken-*.whl .dev/giga/awkward-*.whl .dev/giga/awkward_cpp-*-$py-*.whl .dev/giga/fsspec-*.whl \
    .dev/giga/importlib_metadata-*.whl .dev/giga/zipp-*.whl || exit 1
fi
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
[ -x /tmp/dlm-data ] || { xz -dc .dev/bin/dlm-data.xz > /tmp/dlm-data && chmod +x /tmp/dlm-data; }
nproc; python3 --version; cat .dev/bin/COMMIT; lscpu | grep -E "Model name|L2|L3"
python3 bench/pack/scale.py /tmp/dlm-data /tmp/bps --mb $mb --threads ${THREADS:-1,16} --families $ONLY \
  --shared .dev/tok --no-python --giga --one-core --stages --repeat ${REPEAT:-1} 2>&1 | tee -a $OUT/scale-$(echo $ONLY | tr , _).log
cp /tmp/bps/scale.json $OUT/scale-$(echo $ONLY | tr , _).json 2>/dev/null
