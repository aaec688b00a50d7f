# Fuzzing (issue 18) on the stable toolchain: tests/fuzz/ (one target per parser that takes
# outside bytes). `make test` runs every target once, in `make fuzz-ci` below (its plain
# `cargo test` skips the FUZZ_TARGETS by name; a bare `cargo test` still runs each for a fixed
# number of cases with a fixed seed); `make fuzz` runs each for FUZZ_SECS seconds, one at a
# time, with a seed of your choice. Crashes are saved in target/fuzz-crashes/ with a replay
# command; record them and their fixes in bench/results/fuzz.md and copy the input into
# tests/fuzz/corpus/<target>/ so every later run replays it.
#   make fuzz                                   # every target, 10 minutes each
#   make fuzz FUZZ_SECS=60 FUZZ_TARGETS=hub_headers FUZZ_SEED=7
# `make fuzz-ci` (part of `make test`, issue 42) runs every target for FUZZ_CI_SECS (30 s),
# FUZZ_CI_JOBS (2) at a time, from the built test binary (scripts/fuzz-all.sh prints the
# table). The 10-minute run on a many-core machine: bench/fuzz/device.sh.

FUZZ_SECS ?= 600
FUZZ_SEED ?= 1
FUZZ_TARGETS ?= hub_headers hub_tree hub_revision hub_readme teacher_config safetensors_header \
	chat_template manifest_toml tokenizer_json prompts_jsonl distill_part parquet_footer mds_index \
	mds_shard megatron_idx index_json pipeline_toml manifest_lock output_lock json_rows \
	distilled_json lineage_json
FUZZ_CI_SECS ?= 30
FUZZ_CI_JOBS ?= 2

.PHONY: fuzz
fuzz:
	$(CARGO) test --test fuzz --no-run
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  DLM_FUZZ_SECS=$(FUZZ_SECS) DLM_FUZZ_SEED=$(FUZZ_SEED) DLM_FUZZ_KEEP_GOING=1 \
	    $(CARGO) test --test fuzz -- $$t --exact --nocapture --test-threads=1 || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failing targets:$$failed (inputs in target/fuzz-crashes/)"; exit 1; fi

.PHONY: fuzz-ci
fuzz-ci:
	@bin=$$($(CARGO) test --test fuzz --no-run --message-format=json 2>/dev/null \
	  | grep -o '"executable":"[^"]*fuzz-[0-9a-f]*"' | tail -1 | cut -d'"' -f4); \
	test -n "$$bin" || { echo "fuzz-ci: no fuzz test binary"; exit 1; }; \
	FUZZ_SEED=$(FUZZ_SEED) scripts/fuzz-all.sh "$$bin" $(FUZZ_CI_SECS) $(FUZZ_CI_JOBS)
