#!/usr/bin/env bash
# SmolLM2-135M: generation across L = 8,192 as each runtime runs each export (issue "Serve what was measured").
# workload-short again (measurements/smollm2-workload.sh, whose passes are cached): each row now also decodes a
# 7,168-token prompt through the KV cache to 10,240 tokens in the runtime's segments, against one forward pass of
# the same tokens (the first 10,240 tokens of the table's 16k windows; a switching export on its 4 windows, one that
# runs one schedule at every step on 1). Then the switching YaRN export as a user writes it, its damage printed.
#   bash measurements/smollm2-decode.sh     # from the repository root; ~1 h on 2 cores, every window cached
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
M=none,pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step workload-short compare --model smollm2 --len 16384 --method "$M" --samples 4 --workload 2048:0.7,8192:0.2,16384:0.1
step workload-long compare --model smollm2 --len 16384 --method "$M" --samples 4 --workload 2048:0.1,8192:0.3,16384:0.6
echo "$(date -u +%H:%M:%S) export-switching"
ROPECLI_CACHE_DIR=$C ropecli export --model smollm2 --method yarn --len 16384 --switching --json > "$O/export-yarn-switching.json" 2> "$O/export-yarn-switching.log"
echo "$(date -u +%H:%M:%S) done"
