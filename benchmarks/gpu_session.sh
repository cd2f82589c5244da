#!/usr/bin/env bash
# The GPU check of issue 58, run once on a lent GPU machine (ropecli's `device` run; see ../shared/ROPE_NOTES.md
# "On a GPU"): transformers as tested here, from a carried wheel (.whl/), then
#   A. what a position map costs against the unpatched sdpa forward, 1B shape, 8k ... 128k (bench_gpu_maps.py)
#   B. chunked scoring against the naive model(ids, labels=ids), 1B and 7B, 8k ... 128k (bench_gpu.py)
#   D. the same on Gemma 3 270M's shape (sliding layers banded) and an MLA shape (DeepSeek V3's dims), 64k and 128k
#   C. the CUDA tests (tests/test_gpu.py: every map compiled on CUDA is its CPU twin)
# each under its own time limit, each log written to $OUT as it goes.
#   device run: bash benchmarks/gpu_session.sh      (carry: .whl)
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.log"
timeout "${A_S:-300}" python3 benchmarks/bench_gpu_maps.py --kernel flex --repeats "${A_REPEATS:-2}" --maps "${A_MAPS:-none,selfextend,dca,rerope,dpe}" \
  --lengths "${A_LENGTHS:-8192,16384,32768,65536,131072}" 2>&1 | tee "$OUT/maps.log"
timeout "${D_S:-240}" python3 benchmarks/bench_gpu_maps.py --kernel flex --repeats 1 --maps none,selfextend,dca,rerope \
  --shapes "${D_SHAPES:-270M-swa,mla}" --L 32768 --lengths "${D_LENGTHS:-65536,131072}" 2>&1 | tee "$OUT/maps_270m_mla.log"
timeout "${B_S:-170}" python3 benchmarks/bench_gpu.py --repeats "${B_REPEATS:-2}" \
  --lengths "${B_LENGTHS:-8192,16384,32768,65536,131072}" 2>&1 | tee "$OUT/scoring.log"
timeout "${C_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/tests.log"
