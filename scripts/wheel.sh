#!/usr/bin/env bash
# `make wheel` (issue 59): dist/dlm_data-<version>-py3-none-manylinux_<glibc>_x86_64.whl.
# maturin builds the `dlm-data` binary (pyproject.toml: bindings = "bin", --features cuda,
# profile dist) and audits it; the manylinux tag it claims must be the oldest glibc the binary's
# versioned symbols allow (the newest GLIBC_x.y it references), checked here with objdump, and
# `--auditwheel check` fails the build on any library outside the manylinux policy.
# MATURIN: the maturin executable (make wheel installs a pinned one into .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
MATURIN=${MATURIN:-maturin}
# The commit build.rs records (no .git in maturin's build dir is needed, but say it plainly).
export DLM_BUILD_COMMIT=${DLM_BUILD_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
rm -rf target/wheels
"$MATURIN" build --locked --auditwheel check --out target/wheels
wheel=$(ls target/wheels/dlm_data-*.whl)
[ "$(echo "$wheel" | wc -l)" = 1 ] || { echo "wheel.sh: expected one wheel, got: $wheel" >&2; exit 1; }
# The binary as shipped (the wheel's .data/scripts/dlm-data), not whatever target/ holds.
x=$(mktemp -d); trap 'rm -rf "$x"' EXIT
python3 -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); n = [m for m in z.namelist() if m.endswith('/scripts/dlm-data')]; assert len(n) == 1, z.namelist(); open(sys.argv[2], 'wb').write(z.read(n[0]))" "$wheel" "$x/dlm-data"
bin=$x/dlm-data
need=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
tag="manylinux_${need//./_}_x86_64"
case "$wheel" in
  *"-py3-none-$tag.whl") ;;
  *) echo "wheel.sh: $wheel does not claim $tag (the binary's newest glibc symbol is GLIBC_$need)" >&2; exit 1 ;;
esac
mkdir -p dist
rm -f dist/dlm_data-*.whl
mv "$wheel" dist/
echo "dist/$(basename "$wheel"): $(du -k "dist/$(basename "$wheel")" | cut -f1) KiB, binary needs glibc >= $need"
