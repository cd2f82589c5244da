#!/usr/bin/env bash
# After measurements/smollm2.sh: every export of a deployed schedule checked in its runtime on the real
# model, then the searched families (clamped mixed, tuned YaRN, tuned llama3) searched on windows 0-1 at
# 16,384 = 2L and re-measured with the standard methods on held-out windows 2-5. Same cache, same JSON
# folder; resumable window by window.
#   bash measurements/smollm2-search.sh
set -uo pipefail
cd "$(dirname "$0")/.."
C=measurements/cache
O=measurements/smollm2
W=${ROPECLI_TMPDIR:-/tmp}/ropecli-smollm2-exports
mkdir -p "$W"
step() { local out=$1; shift; echo "$(date -u +%H:%M:%S) $out: ropecli $*"; ropecli "$@" --cache-dir "$C" --json > "$O/$out.json.tmp" 2> "$O/$out.log"; local rc=$?; mv "$O/$out.json.tmp" "$O/$out.json"; echo "  exit $rc"; }
for m in yarn mixed; do
  ropecli export --model smollm2 --method "$m" --len 16384 --to gguf --out "$W/$m-16k.gguf" --force > /dev/null
  step "verify-gguf-$m-16k" verify "$W/$m-16k.gguf" --model smollm2 --method "$m" --len 16384
done
ropecli export --model smollm2 --method yarn --len 16384 --to hf --out "$W/yarn-16k-hf" --force > /dev/null
step verify-hf-yarn-16k verify "$W/yarn-16k-hf" --model smollm2 --method yarn --len 16384
S="--model smollm2 --len 16384 --samples 2 --held-out 4 --budget 10"
step search-mixed-clamped search $S --method mixed --vary b --vary critical
step search-yarn search $S --method yarn --vary beta_fast --vary beta_slow
step search-llama3 search $S --method llama3 --vary low_freq_factor --vary high_freq_factor
# what the searched winners cost within L (the same 4,096-token windows as kl-4k; parameters rounded as printed)
step kl-4k-searched kl --model smollm2 --len 4096 --k 2 --method mixed,yarn,llama3 --b 1.625 --param critical=29.5625 --param beta_fast=128 --param beta_slow=0.2394 --param high_freq_factor=11.3137 --samples 4
