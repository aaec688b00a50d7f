# Byte-identity proof (issue 44): sha256 of every `make demo` output and of fixed CPU distill
# runs, against tests/golden/output-digests.txt (scripts/digests.sh says what is normalised).
#   make digests         fail on any difference
#   make digests-record  record them anew (only for a change meant to change output bytes)
.PHONY: digests digests-record
digests: build
	scripts/digests.sh --check

digests-record: build
	scripts/digests.sh --write
