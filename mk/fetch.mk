# fetch / hub emulator: benchmark against curl on loopback (results: bench/results/fetch.md; new runs in bench/results/raw/fetch-*.md).
.PHONY: bench-fetch hub-emulator
bench-fetch: build
	bench/fetch/run.sh

# Serve the fixture repos (generated into demo-out/hub) in the foreground.
hub-emulator: build
	target/debug/dlm-data hub-emulator --root demo-out/hub --fixtures
