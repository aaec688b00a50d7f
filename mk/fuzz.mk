# Fuzzing (issue 18) on the stable toolchain: tests/fuzz/ (one target per parser that takes
# outside bytes). `make test` already runs every target for a fixed number of cases with a
# fixed seed (a few seconds each); `make fuzz` runs each for FUZZ_SECS seconds, one at a
# time, with a seed of your choice. Crashes are saved in target/fuzz-crashes/ with a replay
# command; record them and their fixes in bench/results/fuzz.md and copy the input into
# tests/fuzz/corpus/<target>/ so every later run replays it.
#   make fuzz                                   # every target, 10 minutes each
#   make fuzz FUZZ_SECS=60 FUZZ_TARGETS=hub_headers FUZZ_SEED=7

FUZZ_SECS ?= 600
FUZZ_SEED ?= 1
FUZZ_TARGETS ?= hub_headers hub_tree hub_revision hub_readme teacher_config safetensors_header \
	chat_template manifest_toml tokenizer_json prompts_jsonl distill_part parquet_footer mds_index \
	mds_shard megatron_idx

.PHONY: fuzz
fuzz:
	$(CARGO) test --test fuzz --no-run
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  DLM_FUZZ_SECS=$(FUZZ_SECS) DLM_FUZZ_SEED=$(FUZZ_SEED) DLM_FUZZ_KEEP_GOING=1 \
	    $(CARGO) test --test fuzz -- $$t --exact --nocapture --test-threads=1 || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failing targets:$$failed (inputs in target/fuzz-crashes/)"; exit 1; fi
