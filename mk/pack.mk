# pack (issue #3): throughput benchmark against ../shared/bench/py_pack_ref.py, and the
# optional check of MDS output with the real mosaicml-streaming StreamingDataset.

.PHONY: bench-pack check-mds-streaming

BENCH_PACK_MB ?= 40

# Release build, then both pipelines on the same generated corpus and 32k tokenizer.
bench-pack: $(VENV)/.stamp
	$(CARGO) build --release --bins
	$(PY) bench/pack/bench.py target/release/dlm-data target/bench-pack --mb $(BENCH_PACK_MB)

# The real MosaicML reader: mosaicml-streaming hard-requires torch, and PyPI's x86_64 torch
# is the CUDA build (~6 GB with its nvidia-* wheels; a CI run once died of ENOSPC here). CPU
# torch and torchvision come from Debian instead (python3-torch 1.13, ~150 MB of .debs), seen
# by a --system-site-packages venv of Debian's python3; streaming itself goes in with
# --no-deps plus what its import needs (its cloud SDKs are imported only for remote paths;
# boto3 for the s3:// remote of tests/object_store_readers.rs).
# One test run with DLM_REQUIRE_STREAMING=1: the MDS shards must be read by
# streaming.StreamingDataset itself, never by the numpy fallback. Part of `make test`.
VENV_MDS := .venv-mds
MDS_DEBS := python3-torch python3-torchvision python3-pil python3-venv
MDS_PKG := mosaicml-streaming==0.13.0
MDS_IMPORT_DEPS := "transformers>=4.21.3,<5" "Brotli>=1.0.9" "python-snappy>=0.6.1,<1" \
	"xxhash>=3,<4" "zstd>=1.5.2.5,<2" "catalogue>=2,<3" "tqdm>=4.64,<5" pyarrow==22.0.0 tokenizers==0.22.1 \
	boto3==1.44.18
$(VENV_MDS)/.stamp: mk/pack.mk
	@dpkg -s $(MDS_DEBS) >/dev/null 2>&1 || { echo "installing $(MDS_DEBS) (Debian)"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(MDS_DEBS); }
	rm -rf $(VENV_MDS)
	/usr/bin/python3 -m venv --system-site-packages $(VENV_MDS)
	$(VENV_MDS)/bin/pip install -q --no-cache-dir --no-deps $(MDS_PKG)
	$(VENV_MDS)/bin/pip install -q --no-cache-dir $(MDS_IMPORT_DEPS)
	$(VENV_MDS)/bin/python -c "import torch, streaming; from streaming import StreamingDataset; \
	  assert torch.__file__.startswith('/usr/lib/python3/'), torch.__file__; print('streaming', streaming.__version__, 'torch', torch.__version__)"
	touch $@

# Made before the cargo tests too: docs/examples/student_loader.py (issue 55) runs on its torch.
TEST_DEPS += $(VENV_MDS)/.stamp

.PHONY: check-mds-streaming
check-mds-streaming: $(VENV_MDS)/.stamp
	DLM_REQUIRE_STREAMING=1 DLM_PYTHON=$(abspath $(VENV_MDS)/bin/python) $(CARGO) test --test pack mds_and_megatron -- --nocapture

# Tokenizer families (issue #15): pack vs the Python pipeline per family, same corpus, one run;
# real tokenizer.json files read in place from ../shared/tokenizers, byte-level shapes trained here.
# gigatoken (issue 43) is the same-run tokenize-only reference: pinned, from PyPI, into the venv.
# BENCH_TOK_ARGS passes --threads 1,2, --vs-giga (no Python pipeline: for >= 200 MB corpora),
# --only, --corpus, --repeat, --check N (bench/tokenizers/bench.py).
.PHONY: bench-tokenizers
BENCH_TOK_MB ?= 8
BENCH_TOK_ARGS ?=
GIGATOKEN_PKG := gigatoken==0.10.0
$(VENV)/.gigatoken: $(VENV)/.stamp mk/pack.mk
	$(VENV)/bin/pip install -q $(GIGATOKEN_PKG)
	touch $@
# HF tokenizers 1.0 beside gigatoken (issue 58): its own venv, the tests' .venv keeps 0.22.
VENV_TOK1 := .venv-tok1
TOK1_PKGS := tokenizers==1.0.0rc3 pyarrow==22.0.0
$(VENV_TOK1)/.stamp: mk/pack.mk
	$(PYTHON) -m venv $(VENV_TOK1)
	$(VENV_TOK1)/bin/pip install -q $(TOK1_PKGS)
	touch $@
bench-tokenizers: $(VENV)/.gigatoken $(VENV_TOK1)/.stamp
	$(CARGO) build --release --bins
	$(PY) bench/tokenizers/bench.py target/release/dlm-data target/bench-tokenizers --mb $(BENCH_TOK_MB) $(BENCH_TOK_ARGS)

# Scaling (issue #31): pack vs the Python pipeline at 1/2/4/8/16 threads, per family, on a
# >= 1 GB code-and-docs corpus built from this machine's Python install. Runs on a box without
# Rust: BIN is a prebuilt release binary (built here when missing and cargo exists), PYBENCH
# any python3 with pyarrow, numpy and tokenizers. BENCH_SCALE_ARGS passes --threads, --ceiling,
# --families, --shared DIR (tokenizers), --ref PATH (py_pack_ref.py), --ref-mb, --stages,
# --repeat N (fastest of N, thread counts alternating: shared many-core hosts drift by ±20 %
# within minutes, bench/results/pack-scale.md), --hw (what the cores themselves keep with N
# busy: a pure-compute loop pinned alone vs N at once, and the efficiency over it), --giga
# (gigatoken beside each row, issue 43), --one-core (the 1-thread pack pinned to one core as the
# scaling baseline: an unpinned 1-thread pack keeps 1.2-1.8 cores busy), --no-python.
# BENCH_SCALE_MB=4096 for steady state on a fast box: at 200+ Mtok/s a 1 GB run is ~1.5 s at
# 16 threads, ~11 % of it start-up and the last shard.
.PHONY: bench-pack-scale
BENCH_SCALE_MB ?= 1024
BENCH_SCALE_BIN ?= target/release/dlm-data
BENCH_SCALE_WORK ?= target/bench-pack-scale
PYBENCH ?= $(if $(wildcard $(PY)),$(PY),python3)
bench-pack-scale:
	@test -x $(BENCH_SCALE_BIN) || $(CARGO) build --release --bins
	$(PYBENCH) bench/pack/scale.py $(BENCH_SCALE_BIN) $(BENCH_SCALE_WORK) --mb $(BENCH_SCALE_MB) $(BENCH_SCALE_ARGS)
