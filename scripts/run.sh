#!/usr/bin/env bash
# Set everything up and run the main job on the default model (smollm2-135m): find a head set whose removal
# improves arithmetic, test it on held-out data, measure what it costs sentiment (--control), export the pruned
# model (sliced safetensors) and verify it. Arithmetic is a generation task: every condition decodes. find
# guards the run with general text by default (docs/find.md); a claim not confirmed, the gain or its guard,
# exports nothing. Nothing compiles. Measured times: docs/install.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
RUN=runs/smollm2-135m-arithmetic
OUT=exports/smollm2-135m-arithmetic-pruned
# find, then (confirmed) export and verify, as scripts/bench/main_job.py writes them (the README's commands and output
# are rendered from its record); 0 confirmed and exported, 1 not confirmed (nothing exported), 2+ an error.
.venv/bin/python -m scripts.bench.main_job --json runs/main-job.json
echo
echo "find report:  $RUN/report.md (heatmap $RUN/screen.png)"
echo "pruned model: $OUT (model card $OUT/README.md)"
echo "load it:      python -c 'import headprune; m = headprune.load(\"$OUT\")'"
echo "         or:  AutoModelForCausalLM.from_pretrained(\"$OUT\", trust_remote_code=True)"
