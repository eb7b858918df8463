#!/usr/bin/env bash
# Set everything up and run the main job on the default model (smollm2-135m) and task (sentiment):
# find an improving head set (held-out verdict), export the pruned model (sliced safetensors), verify it.
# Sizes are chosen to finish in well under 20 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
RUN=runs/smollm2-135m-sentiment
OUT=exports/smollm2-135m-sentiment-pruned
status=0
.venv/bin/headprune find smollm2-135m --task sentiment --discovery 200 --heldout 400 \
    --screen attribution --candidates 12 --nominees 4 --max-heads 2 --finalists 3 --out "$RUN" || status=$?
if [ "$status" -gt 1 ]; then exit "$status"; fi  # 0 confirmed, 1 not confirmed: both are results
.venv/bin/headprune export smollm2-135m --heads "$RUN/result.json" --out "$OUT"
echo
echo "find report:  $RUN/report.md (heatmap $RUN/screen.png)"
echo "pruned model: $OUT (model card $OUT/README.md)"
echo "load it:      python -c 'import headprune; m = headprune.load(\"$OUT\")'"
echo "         or:  AutoModelForCausalLM.from_pretrained(\"$OUT\", trust_remote_code=True)"
