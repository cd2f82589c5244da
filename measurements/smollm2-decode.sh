#!/usr/bin/env bash
# SmolLM2-135M: generation across L = 8,192 as each runtime runs each export (issue "Serve what was measured").
# The short-traffic workload of measurements/smollm2-workload.sh (whose one-pass windows are cached) for the
# unscaled model, YaRN, NTK-fixed, Llama 3 and PI: each row also decodes a 7,168-token prompt through the KV cache
# to 10,240 tokens in the runtime's segments, against one forward pass of the same tokens (the first 10,240 tokens
# of the table's 16k windows; a switching export on all 4 windows, one that runs one schedule at every step on 1),
# and its PPL at L = 8,192 as that runtime serves it, against the model as shipped. ~3 min per decoded window on
# 2 cores; every window cached (measurements/cache), so a rerun with more methods computes only the new ones.
#   bash measurements/smollm2-decode.sh     # from the repository root
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step workload-decode compare --model smollm2 --len 16384 --method none,yarn,ntk-fixed,llama3,pi --samples 4 --workload 2048:0.7,8192:0.2,16384:0.1
echo "$(date -u +%H:%M:%S) done"
