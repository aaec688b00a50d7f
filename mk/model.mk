# model chain: hashing a MiniCPM5-2B-shaped checkpoint (lineage add) vs sha256sum, same run.
# The dev build suffices: the hashing is the sha2 crate, which the dev profile builds at opt-level 3.
.PHONY: bench-model-chain
bench-model-chain:
	$(CARGO) build --bin dlm-data
	BIN=target/debug/dlm-data scripts/bench-model-chain.sh
