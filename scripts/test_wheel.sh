#!/usr/bin/env bash
# The package a user gets from pip, tested as they would have it (run by scripts/test.sh, so by CI):
# python -m build makes the sdist and, from it, the wheel; twine checks their metadata; the wheel (with its [onnx] and
# [gguf] extras) installs into a fresh virtual environment outside the source tree, and scripts/wheel_smoke.py,
# copied into an empty folder there, runs headprune --version, headprune tasks, a find on a tiny model and its
# exports to safetensors, GGUF and ONNX, each loaded back (headprune.load; ONNX in ONNX Runtime) and compared with
# the masked original. A file the wheel lacks fails it.
# Needs .venv with the [test] extra (scripts/setup.sh); torch comes from pip's cache as setup.sh left it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY="$ROOT/.venv/bin/python"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/headprune-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# A pip command, quiet unless it fails.
pip() { "$@" --disable-pip-version-check -q >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log"; return 1; }; }
started=$SECONDS
"$PY" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
"$PY" -m twine check --strict "$WORK"/dist/*
WHEEL=$(ls "$WORK"/dist/headprune-*.whl)
VERSION=$(basename "$WHEEL" | cut -d- -f2)
# A fresh environment on .venv's base interpreter (venv run from a venv uses it), without --system-site-packages:
# .venv holds an editable install of this tree.
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
# torch first and pinned, as scripts/setup.sh does (an unpinned torch would pull a CUDA build).
pip "$VPY" -m pip install --no-compile torch==2.13.0
pip "$VPY" -m pip install --no-compile --only-binary=xllamacpp "$WHEEL[onnx,gguf]"
echo "built, checked and installed headprune $VERSION in $((SECONDS - started)) s"
mkdir "$WORK/user" && cp scripts/wheel_smoke.py "$WORK/user/"
GENERAL=$(grep -c . headprune/tasks/data/general.jsonl)  # the wheel must ship the built-in guard sample whole
# From outside the tree, with nothing of it on the path.
(cd "$WORK/user" && env -u PYTHONPATH HF_HOME="$WORK/hf" HEADPRUNE_CACHE="$WORK/cache" "$VPY" -I wheel_smoke.py "$VERSION" "$GENERAL")
echo "wheel test: $((SECONDS - started)) s in all"
