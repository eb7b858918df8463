#!/usr/bin/env bash
# Set everything up and run the main job on the default model (smollm2-135m) and task (sentiment).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/headprune eval smollm2-135m --task sentiment --limit 200
