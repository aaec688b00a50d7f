# mcq / decontam / audit: the decontamination benchmark (the stage's tests need no set-up
# beyond the crate itself).
.PHONY: bench-decontam
bench-decontam: venv
	$(CARGO) build --release --bin dlm-data
	BIN=target/release/dlm-data DLM_PYTHON=$(abspath $(PY)) bench/decontam/run.sh
