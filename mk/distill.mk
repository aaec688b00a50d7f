# distill: CPU teacher benchmark (block-only sampler vs the literal LLaDA loop, same run).
.PHONY: bench-distill
bench-distill:
	$(CARGO) run --example distill_bench -- --out bench/results/distill-cpu.json
