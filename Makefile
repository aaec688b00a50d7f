# dlm-data — the two set-up commands are `make demo` and `make test` (see README.md).
# Stage-specific targets live in mk/*.mk; each may add prerequisites to TEST_DEPS.

SHELL := /bin/bash
CARGO ?= cargo
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_DEPS :=
# Integration tests find helper tools through these.
export DLM_PYTHON := $(abspath $(PY))
# pip's wheel cache would hold a second copy of every wheel on CI's disk; nothing reuses it.
export PIP_NO_CACHE_DIR := 1

-include mk/*.mk

.PHONY: build test demo clean fmt
build:
	$(CARGO) build --bins

# The fuzz targets run once, in `fuzz-ci` (30 s each): the plain test run skips them by name
# (`--exact`: only the fuzz binary has tests of exactly these names, tests/architecture.rs).
test: $(TEST_DEPS)
	$(CARGO) test --all-targets -- --test-threads=2 --exact $(foreach t,$(FUZZ_TARGETS),--skip $(t))
	RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links" $(CARGO) doc --no-deps
	$(MAKE) fuzz-ci
	$(MAKE) check-mds-streaming
	$(MAKE) test-slurm

demo: build
	scripts/demo.sh

fmt:
	$(CARGO) fmt --all

clean:
	rm -rf target $(VENV) .venv-mds .venv-s3 .venv-s3-readers .venv-tok1 demo-out dist
