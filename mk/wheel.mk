# The wheel (issue 59): `make wheel` → dist/dlm_data-<version>-py3-none-manylinux_<glibc>_x86_64.whl,
# the `dlm-data` binary alone (pyproject.toml), built with `--features cuda` (one binary for CPU
# and GPU machines) in the `dist` profile (Cargo.toml) by maturin from PyPI (pinned, into .venv),
# and checked for manylinux compliance at the oldest glibc it claims (scripts/wheel.sh).
# `make test-wheel` (part of `make test`) installs it with `pip install --no-index` into a fresh
# venv and runs it there with no Rust toolchain on PATH (scripts/wheel-test.sh).
# Build time and size: bench/results/install.md.
MATURIN_PKG := maturin==1.16.0

$(VENV)/.stamp-maturin: $(VENV)/.stamp mk/wheel.mk
	$(VENV)/bin/pip install -q $(MATURIN_PKG)
	touch $@

.PHONY: wheel test-wheel
wheel: $(VENV)/.stamp-maturin
	MATURIN=$(abspath $(VENV))/bin/maturin scripts/wheel.sh

test-wheel: wheel
	PYTHON=$(PYTHON) scripts/wheel-test.sh

TEST_DEPS += test-wheel
