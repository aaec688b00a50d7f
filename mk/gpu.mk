# GPU teacher (feature `cuda`), checked on CI machines without a GPU:
#  - the cuda code builds (the library with the distill hook, the dlm-gpu harness, the
#    offline tests), reusing the dev-profile dependencies `make test` builds anyway
#    (`cargo check` would add a second, metadata-only pass over every dependency);
#  - the one binary the wheel ships (issue 59): tests/one_binary.rs with the cuda build runs its
#    CPU commands on this machine without libcuda (`distill --device auto` falls back to the
#    CPU, `--device cuda` fails at once naming libcuda.so.1);
#  - every kernel in kernels/*.cu compiles with NVRTC 13.0 from PyPI (pinned: the device's
#    driver is CUDA 13.0 and rejects newer code) into an sm_90 cubin with all entry points.
NVRTC_PKG := nvidia-cuda-nvrtc==13.0.88

$(VENV)/.stamp-nvrtc: $(VENV)/.stamp mk/gpu.mk
	$(VENV)/bin/pip install -q $(NVRTC_PKG)
	touch $@

.PHONY: gpu-check gpu-release
gpu-check: $(VENV)/.stamp-nvrtc
	$(CARGO) build --features cuda --bin dlm-gpu
	LD_LIBRARY_PATH="$$(ls -d $(abspath $(VENV))/lib/python3*/site-packages/nvidia/cu13/lib)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
		$(CARGO) test --features cuda --test gpu_offline --test one_binary -- --test-threads=2

# The binaries for the GPU machine (bench/gpu/run.sh stages them for the device).
gpu-release:
	$(CARGO) build --release --features cuda --bins

TEST_DEPS += gpu-check

# The GPU benchmark on a machine with an NVIDIA GPU, PyTorch and transformers (one command:
# parity, dlm-data distill CPU vs CUDA, kill -9 resume on the GPU, the step profile, dlm-gpu vs torch_sampler_ref.py eager,
# --compile and dual at batch 1/16/64, the approximate modes). Results: bench/results/raw/gpu-<date>/ (write-up: bench/results/gpu.md).
# On a GPU box without Rust, run bench/gpu/stage.sh elsewhere and `bash run.sh ...` there.
GPU_BENCH_STEPS ?= parity e2e resume nonfinite teacher torch-parity profile bench approx approx-peaked bench-dual bench-prefix torch-dual torch-eager torch-compile table
.PHONY: bench-gpu
bench-gpu:
	DLM_STAGE_DIR=$(abspath target/gpu-bench) bash bench/gpu/stage.sh release
	OUT=$(abspath bench/results/raw)/gpu-$$(date +%Y%m%d-%H%M) bash target/gpu-bench/run.sh $(GPU_BENCH_STEPS)
