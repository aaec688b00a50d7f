# GPU teacher (feature `cuda`), checked on CI machines without a GPU:
#  - the cuda code type-checks (all targets);
#  - every kernel in kernels/*.cu compiles with NVRTC 13.0 from PyPI (pinned: the device's
#    driver is CUDA 13.0 and rejects newer code) into an sm_90 cubin with all entry points.
NVRTC_PKG := nvidia-cuda-nvrtc==13.0.88

$(VENV)/.stamp-nvrtc: $(VENV)/.stamp mk/gpu.mk
	$(VENV)/bin/pip install -q $(NVRTC_PKG)
	touch $@

.PHONY: gpu-check gpu-release
gpu-check: $(VENV)/.stamp-nvrtc
	$(CARGO) check --features cuda --all-targets
	LD_LIBRARY_PATH="$$(ls -d $(abspath $(VENV))/lib/python3*/site-packages/nvidia/cu13/lib)$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}" \
		$(CARGO) test --features cuda --test gpu_offline -- --test-threads=2

# The binaries for the GPU machine (bench/gpu/run.sh stages them for the device).
gpu-release:
	$(CARGO) build --release --features cuda --bins

TEST_DEPS += gpu-check
