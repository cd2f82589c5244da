#!/usr/bin/env bash
# Regenerates every figure of README.md and docs/*.md on the built-in model, offline, on a CPU.
# Usage (from anywhere, in the environment where ropecli is installed):
#     bash docs/figures/make_figures.sh
# Writes into this script's own folder: passkey-builtin.png, position-builtin.png, search-mixed-map.png,
# advise-factors.png, tasks-niah-single-builtin.png, shipped-factors.png.
# Set ROPECLI_CACHE_DIR to reuse (or keep) the evaluations between runs.
# Measured with an empty cache on a 2-core CPU shared with other work: passkey 6 min, search 8 min,
# advise 9 min (about 23 min in all); a rerun with the same cache only redraws.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Passkey accuracy by depth and length, one panel per schedule (docs/measurements/builtin.md's passkey table).
ropecli passkey --text --len 256 --len 512 --len 1024 --len 2048 --method none,pi,ntk-fixed,mixed \
    --b 0.625 --b 1 --samples 4 --plot "$here/passkey-builtin.png"

# Loss by position at 8L, the paired differences to the best below (docs/measurements/builtin.md's loss by position).
ropecli compare --len 2048 --method none,pi,ntk-fixed,yarn,mixed --samples 8 --plot "$work/ppl.png"
cp "$work/ppl-position.png" "$here/position-builtin.png"

# The clamped mixed family's search at 8L: evaluated points, numbered in order (docs/measurements/builtin.md).
ropecli search --method mixed --vary b --vary critical --samples 8 --plot "$here/search-mixed-map.png"

# The advise tournament with no arguments; its report's Λ_m picture (factors.png) is the figure.
ropecli advise --out "$work/advice"
cp "$work/advice/factors.png" "$here/advise-factors.png"

# RULER's niah-single on the plays, answer-likelihood gain by needle depth x length (docs/tasks.md).
ropecli compare --len 512 --len 1024 --len 2048 --task niah-single --method none,pi,yarn,llama3 --samples 2 \
    --depths 0,0.25,0.5,0.75,1 --plot "$work/ppl.png"
cp "$work/ppl-niah-single.png" "$here/tasks-niah-single-builtin.png"

echo "figures written to $here"

# The pre-scaled built-in model's shipped schedule (native), composed YaRN and re-derived llama3 at 2 x Ls
# (docs/guide/shipped.md); no evaluation, instant.
ropecli plot --model builtin-llama3 --method native,native+yarn,llama3 --target-len 2048 --out "$here/shipped-factors.png"

# DPE's detected groups on the built-in model at 4L (docs/methods.md, "Per-pair maps"): each pair's farthest rotation
# distance under the map against its wavelength and L; no evaluation, instant.
ropecli plot freqs --d 64 -L 256 --k 4 --method none --map dpe:W=32,G1=16,G2=32,G3=8,G4=16,G5=16,G6=16,G7=32,G8=1 --out "$here/dpe-freqs.png"
