#!/usr/bin/env bash
# Set everything up and run the whole test suite (what CI runs), then the fast tier again on the stated floors of
# torch, transformers, accelerate, safetensors and huggingface-hub (scripts/test_floors.sh, its own environment), then
# the built package installed apart from the tree (scripts/test_wheel.sh: sdist, wheel, twine check, find and exports).
# Extra pytest arguments pass through to the suite; with arguments the floors and wheel steps run only if
# HEADPRUNE_FLOORS=1 and HEADPRUNE_WHEEL=1.
# Every optional extra is installed here, so a test skipped for a missing package fails (HEADPRUNE_REQUIRE_EXTRAS).
# With HEADPRUNE_TIMES=PATH, each step's seconds, exit status and test counts go to the JSON record PATH
# (scripts/bench/ci.py; docs/install.md's CI table is docs/bench/ci.json rendered).
set -euo pipefail
cd "$(dirname "$0")/.."
STARTED=$SECONDS
bash scripts/setup.sh
status=0
STEPS="$(mktemp -d)"
trap 'rm -rf "$STEPS"' EXIT
# step NAME COMMAND...: run it, its output shown and kept (for its test counts), its seconds and status noted.
step() {
    local name="$1" start=$SECONDS rc=0; shift
    "$@" 2>&1 | tee "$STEPS/$name.log" || rc=${PIPESTATUS[0]}
    echo "$name $((SECONDS - start)) $rc" >> "$STEPS/steps"
    [ "$rc" = 0 ] || status=$rc
}
echo "setup $((SECONDS - STARTED)) 0" >> "$STEPS/steps"
# pytest-xdist: one worker per core, at most 4 (each holds its own torch and models); HEADPRUNE_TEST_WORKERS=0
# runs in this process.
WORKERS="${HEADPRUNE_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
step suite env HEADPRUNE_REQUIRE_EXTRAS=1 .venv/bin/python -m pytest -q -ra -n "$WORKERS" --dist loadgroup "$@"
if [ $# -eq 0 ] || [ "${HEADPRUNE_FLOORS:-0}" = 1 ]; then
    echo "== the stated floors (scripts/test_floors.sh)"
    step floors bash scripts/test_floors.sh
fi
if [ $# -eq 0 ] || [ "${HEADPRUNE_WHEEL:-0}" = 1 ]; then
    echo "== the built package (scripts/test_wheel.sh)"
    step wheel bash scripts/test_wheel.sh
fi
if [ -n "${HEADPRUNE_TIMES:-}" ]; then
    .venv/bin/python -m scripts.bench.ci --steps "$STEPS" --seconds "$((SECONDS - STARTED))" --json "$HEADPRUNE_TIMES"
fi
exit "$status"
