#!/bin/bash
# usage: ab.sh FAMILY CORPUS ROUNDS BIN_A BIN_B — the o200k section's ab.sh
# (../tokenizers-2026-12-06c/ab.sh: 1-thread pack, A and B alternating, shards compared) with
# this section's /tmp/t4-* paths (tokenizers under /tmp/t4-bench/tok).
exec bash <(sed 's#/tmp/t2-#/tmp/t4-#g' "$(dirname "$0")/../tokenizers-2026-12-06c/ab.sh") "$@"
