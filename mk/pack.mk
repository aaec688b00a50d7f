# pack (issue #3): throughput benchmark against ../shared/bench/py_pack_ref.py, and the
# optional check of MDS output with the real mosaicml-streaming StreamingDataset.

.PHONY: bench-pack check-mds-streaming

BENCH_PACK_MB ?= 40

# Release build, then both pipelines on the same generated corpus and 32k tokenizer.
bench-pack: $(VENV)/.stamp
	$(CARGO) build --release --bins
	$(PY) bench/pack/bench.py target/release/dlm-data target/bench-pack --mb $(BENCH_PACK_MB)

# The real MosaicML reader: mosaicml-streaming hard-requires torch (+ transformers<5, cloud
# SDKs), GBs of wheels on x86_64 PyPI, so it gets its own venv (about 5 GB, ~9 min on a fresh
# machine) and one test run with DLM_REQUIRE_STREAMING=1: the MDS shards must be read by
# streaming.StreamingDataset itself, never by the numpy fallback. Part of `make test`.
VENV_MDS := .venv-mds
MDS_PKGS := mosaicml-streaming==0.13.0 pyarrow==22.0.0 tokenizers==0.22.1
$(VENV_MDS)/.stamp: mk/pack.mk
	test -x $(VENV_MDS)/bin/python || $(PYTHON) -m venv $(VENV_MDS)
	$(VENV_MDS)/bin/pip install -q --upgrade pip
	$(VENV_MDS)/bin/pip install -q $(MDS_PKGS)
	touch $@

.PHONY: check-mds-streaming
check-mds-streaming: $(VENV_MDS)/.stamp
	DLM_REQUIRE_STREAMING=1 DLM_PYTHON=$(abspath $(VENV_MDS)/bin/python) $(CARGO) test --test pack mds_and_megatron -- --nocapture

# Tokenizer families (issue #15): pack vs the Python pipeline per family, same corpus, one run;
# real tokenizer.json files read in place from ../shared/tokenizers, byte-level shapes trained here.
.PHONY: bench-tokenizers
BENCH_TOK_MB ?= 8
bench-tokenizers: $(VENV)/.stamp
	$(CARGO) build --release --bins
	$(PY) bench/tokenizers/bench.py target/release/dlm-data target/bench-tokenizers --mb $(BENCH_TOK_MB)
