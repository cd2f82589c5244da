#!/usr/bin/env bash
# The pre-scaled built-in model (--model builtin-llama3: L0 = 256, ships llama3 x4 for Ls = 1024) measured as shipped:
# within Ls, native against unscaled RoPE and the other methods; at 2 x Ls, the re-derived family (k = N / L0) against
# the composed one (native+METHOD, k' = N / Ls); then advise at 2 x Ls with both families.
# Cache committed in measurements/cache: a rerun prints the same tables in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
C="--cache-dir measurements/cache"
ropecli compare --model builtin-llama3 --method native,none,pi,yarn,llama3,ntk-fixed --len 512 --len 1024 --samples 16 $C \
  --json > measurements/prescaled/within-Ls.json
ropecli compare --model builtin-llama3 --len 2048 --samples 16 $C --json \
  --method native,none,pi,ntk-fixed,yarn,llama3,native+pi,native+ntk-fixed,native+yarn,native+llama3 \
  > measurements/prescaled/at-2Ls.json
ropecli advise --model builtin-llama3 --len 2048 $C --out measurements/prescaled/advise --json \
  > measurements/prescaled/advise.json
