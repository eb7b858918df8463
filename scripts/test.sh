#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs), then the fast tier again on the stated floors of
# torch, transformers, accelerate, safetensors and huggingface-hub (scripts/test_floors.sh, its own environment), then
# the built package installed apart from the tree (scripts/test_wheel.sh: sdist, wheel, twine check, find and exports).
# Extra pytest arguments pass through to the suite; with arguments the floors and wheel steps run only if
# HEADPRUNE_FLOORS=1 and HEADPRUNE_WHEEL=1.
# Every optional extra is installed here, so a test skipped for a missing package fails (HEADPRUNE_REQUIRE_EXTRAS).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
status=0
# pytest-xdist: one worker per core, at most 4 (each holds its own torch and models); HEADPRUNE_TEST_WORKERS=0
# runs in this process.
WORKERS="${HEADPRUNE_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
HEADPRUNE_REQUIRE_EXTRAS=1 .venv/bin/python -m pytest -q -ra -n "$WORKERS" --dist loadgroup "$@" || status=$?
if [ $# -eq 0 ] || [ "${HEADPRUNE_FLOORS:-0}" = 1 ]; then
    echo "== the stated floors (scripts/test_floors.sh)"
    bash scripts/test_floors.sh || status=$?
fi
if [ $# -eq 0 ] || [ "${HEADPRUNE_WHEEL:-0}" = 1 ]; then
    echo "== the built package (scripts/test_wheel.sh)"
    bash scripts/test_wheel.sh || status=$?
fi
exit "$status"
