# pack (issue #3): throughput benchmark against ../shared/bench/py_pack_ref.py, and the
# optional check of MDS output with the real mosaicml-streaming StreamingDataset.

.PHONY: bench-pack check-mds-streaming

BENCH_PACK_MB ?= 40

# Release build, then both pipelines on the same generated corpus and 32k tokenizer.
bench-pack: $(VENV)/.stamp
	$(CARGO) build --release --bins
	$(PY) bench/pack/bench.py target/release/dlm-data target/bench-pack --mb $(BENCH_PACK_MB)

# mosaicml-streaming hard-requires torch (+ torchvision, transformers, cloud SDKs); on x86_64
# PyPI that is GBs of CUDA wheels, so it stays out of `make test` (which reads the MDS layout
# with numpy). This target installs the smallest working set into its own venv: the streaming
# wheel without its cloud/vision deps, its runtime imports, and torch.
VENV_MDS := .venv-mds
check-mds-streaming: build
	test -x $(VENV_MDS)/bin/python || $(PYTHON) -m venv $(VENV_MDS)
	$(VENV_MDS)/bin/pip install -q numpy pyarrow tokenizers torch xxhash zstd brotli python-snappy tqdm typing_extensions pillow
	$(VENV_MDS)/bin/pip install -q --no-deps mosaicml-streaming
	DLM_PYTHON=$(abspath $(VENV_MDS)/bin/python) $(CARGO) test --test pack mds_and_megatron -- --nocapture
