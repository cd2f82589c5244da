#!/usr/bin/env bash
# SmolLM2-135M served over two workloads (issue "Advise for the traffic and the runtime"): the 8 deployed
# methods exported for 2L = 16,384 tokens, each served by transformers (default export and --consistent),
# vLLM and llama.cpp at 2,048, 8,192 and 16,384 tokens, on the 4 windows of measurements/smollm2-tokens.sh
# (its 16k windows' kept per-prediction NLL give every static schedule's shorter lengths without a pass;
# new passes: the unscaled model and YaRN's short_factor = 1 export at 8k, dynamic NTK at 2k/8k, vLLM's
# frozen dynamic NTK at 16k). The second workload reuses all of the first's windows.
#   bash measurements/smollm2-workload.sh     # from the repository root, after measurements/smollm2-tokens.sh
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
M=none,pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step workload-short compare --model smollm2 --len 16384 --method "$M" --samples 4 --workload 2048:0.7,8192:0.2,16384:0.1
step workload-long compare --model smollm2 --len 16384 --method "$M" --samples 4 --workload 2048:0.1,8192:0.3,16384:0.6
