"""Stand-in CUDA libraries so that PyPI's (CUDA) torch wheel imports and runs on the CPU without its GB of
NVIDIA libraries: for the floors check only (scripts/test_floors.sh).

This machine's package index serves a CPU build of torch only for the version scripts/setup.sh installs; an older
torch comes from PyPI as a CUDA build whose NVIDIA dependencies are several GB. torch's CPU kernels are the same
code in both builds, and a CUDA build without a GPU never calls CUDA beyond asking how many GPUs there are. So the
wheel is installed without its dependencies, and the dynamic loader is given stubs: one library per name
torch's libraries link against, defining every symbol they take from it (under the version they ask for). Every
stub function returns 100 (``cudaErrorNoDevice`` / ``CUDA_ERROR_NO_DEVICE``), so torch sees no GPU; the few that
return a message return a fixed one. Usage: ``python cuda_stubs.py TORCH_LIB_DIR OUT_DIR`` (then
``LD_LIBRARY_PATH=OUT_DIR``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

CUDA_VERSION = re.compile(r"^(lib(cu|nv|nccl)\S*\.so\.\d+|NVSHMEM)$")
CUDA_NAME = re.compile(r"^(cu|nccl|nvrtc|nvshmem|nvtx|cupti|cudnn)", re.IGNORECASE)
MESSAGE = re.compile(r"(ErrorString|ErrorName|StatusString|StatusName)$")
SONAME_OF = {"NVSHMEM": "libnvshmem_host.so.3"}


def _symbols(lib: Path, flag: str) -> list[str]:
    out = subprocess.run(["nm", "-D", flag, str(lib)], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.split()]


def _needed(lib: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"NEEDED.*\[(.+)\]", out)


def _source(names: list[str]) -> str:
    lines = ['static const char message[] = "no CUDA (a stub for headprune\'s floors check)";']
    for name in sorted(set(names)):
        if MESSAGE.search(name) and not name.startswith("cuGet"):
            lines.append(f"const char *{name}(void) {{ return message; }}")
        else:
            lines.append(f"long {name}(void) {{ return 100; }}")
    return "\n".join(lines) + "\n"


def build(torch_lib: Path, out: Path) -> list[str]:
    """Compile the stubs into ``out``; the sonames written."""
    libs = sorted(torch_lib.glob("*.so"))
    defined = {s.split("@")[0] for lib in libs for s in _symbols(lib, "--defined-only")}
    versioned: dict[str, list[str]] = defaultdict(list)
    plain: set[str] = set()
    sonames: set[str] = set()
    for lib in libs:
        sonames |= {n for n in _needed(lib) if CUDA_VERSION.match(n)} | {n for n in _needed(lib) if n == "libcuda.so.1"}
        for symbol in _symbols(lib, "--undefined-only"):
            name, _, version = symbol.partition("@")
            if version and CUDA_VERSION.match(version):
                versioned[version].append(name)
            elif not version and CUDA_NAME.match(name) and name not in defined:
                plain.add(name)
    sonames |= {SONAME_OF.get(v, v) for v in versioned}
    out.mkdir(parents=True, exist_ok=True)
    for soname in sorted(sonames):
        version = next((v for v in versioned if SONAME_OF.get(v, v) == soname), None)
        names = versioned[version] if version else sorted(plain)
        (out / f"{soname}.c").write_text(_source(names))
        command = ["gcc", "-shared", "-fPIC", "-o", str(out / soname), f"-Wl,-soname,{soname}", str(out / f"{soname}.c")]
        if version:
            script = out / f"{soname}.map"
            script.write_text(f"{version} {{ global: {'; '.join(sorted(set(names)))}; }};\n")
            command.append(f"-Wl,--version-script={script}")
        subprocess.run(command, check=True)
    return sorted(sonames)


if __name__ == "__main__":
    print(" ".join(build(Path(sys.argv[1]), Path(sys.argv[2]))))
