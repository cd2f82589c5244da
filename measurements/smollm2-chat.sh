#!/usr/bin/env bash
# Issue 70, point 4: SmolLM2-135M-Instruct (L = 8192) within L and at 2L on the tasks as the field publishes them: the
# published passkey raw and in the model's own chat template, ropecli's passkey-text, for the model as shipped (none),
# YaRN x2 and Self-Extend (G = 4, W = 2048), the same 3 prompts per cell (depths 0.2, 0.5, 0.8), paired; then
# lm-evaluation-harness's niah_single_1 through the exported folders (benchmarks/lm_eval_agreement.py).
#   bash measurements/smollm2-chat.sh      # from the repository root; hours on 2 cores, cached window by window
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
S="--model smollm2 --method none,yarn --map none --map selfextend:G=4,W=2048@none --k 2 --depths 0.2,0.5,0.8 --prompts 1 --samples 1"
for n in 8192 16384; do
  step "published-raw-$n" compare $S --metric passkey,passkey-text --len $n
  step "published-chat-$n" compare $S --metric passkey --len $n --chat-template auto
done
