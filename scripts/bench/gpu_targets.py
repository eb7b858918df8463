"""headprune's targets on one GPU (find and export at real model shapes near the hardware's limits, the research
protocol at 3B within minutes) against what ``scripts/gpu/run.sh`` measured: one line each, measured, target, and
whether it is met (or what is missing). Reads a folder of records: ``protocol.json`` and ``gpu_check*.json`` (from
gpu_check), ``main_job.jsonl`` (the README main job's find wall times, one line per dtype).

    python -m scripts.bench.gpu_targets /tmp/keep
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

# (what, at least or at most, target): shares of the measured bfloat16 peak (effective: 2 x parameters x tokens),
# of the roofline limit, seconds or minutes.
TARGETS = {
    "screen and joint, 8B shape (of peak)": (">=", 0.75), "screen and joint, 1B shape (of peak)": (">=", 0.60),
    "baseline (of peak)": (">=", 0.60), "attribution (of peak)": (">=", 0.40),
    "decoding (of its bandwidth limit)": (">=", 0.50), "full 8B sliced export + verification (s)": ("<=", 60.0),
    "exact protocol at 3B (min)": ("<=", 25.0), "protocol with the attribution pre-screen (min)": ("<=", 5.0),
    "main job find, bfloat16 over float32 (warm)": ("<=", 1.0),
}


def _records(folder: Path) -> tuple[list[dict], dict | None, dict]:
    """gpu_check's configs, the protocol's result, and a header (device, torch) from whichever record has one."""
    configs, protocol, header = [], None, {}
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if record.get("bench") != "gpu_check":
            continue
        header = header or {k: record.get(k) for k in ("device", "torch", "cuda", "measured_bf16_matmul_tflops",
                                                        "measured_bandwidth_gbs")}
        for result in record.get("results", []):
            if str(result.get("config", "")).startswith("protocol"):
                protocol = result
            else:
                configs.append(result)
    return configs, protocol, header


def _rows(configs: list[dict], shape: str | None, *names: str) -> Iterator[tuple[str, dict]]:
    for config in configs:
        if shape is None or config["config"] == shape:
            for row in config["rows"]:
                if row["part"].startswith(names):
                    yield f"{config['config']}x{config['layers']}", row


def measured(folder: Path) -> dict[str, list[tuple[str, float]]]:
    """Each target's measurements, as (where, value) pairs; an empty list where nothing was measured."""
    configs, protocol, _ = _records(folder)
    share = lambda shape, *names, key="of_measured_peak": [  # noqa: E731
        (f"{where} {row['part']}", row[key]) for where, row in _rows(configs, shape, *names) if row.get(key)]
    out = {"screen and joint, 8B shape (of peak)": share("8b", "choice: screen", "choice: joint"),
           "screen and joint, 1B shape (of peak)": share("1b", "choice: screen", "choice: joint"),
           "baseline (of peak)": share(None, "choice: baseline"),
           "attribution (of peak)": share(None, "choice: attribution"),
           "decoding (of its bandwidth limit)": share(None, "generate: baseline", "generate: screen", key="of_limit"),
           "full 8B sliced export + verification (s)": [
               (where, row["seconds"]) for where, row in _rows(configs, "8b", "export: sliced")
               if where == "8bx32"]}
    if protocol is not None:
        how = "sampled" if protocol.get("sampled") else "run"
        out["exact protocol at 3B (min)"] = [(f"{protocol['config']} ({how})", protocol["total_minutes"]["exact"])]
        prescreen = protocol["total_minutes"]["attribution pre-screen"]  # None where the attribution pass failed
        out["protocol with the attribution pre-screen (min)"] = [] if prescreen is None else [
            (f"{protocol['config']} ({how})", prescreen)]
    finds = {}
    main_job = folder / "main_job.jsonl"
    if main_job.is_file():
        for line in main_job.read_text().splitlines():
            row = json.loads(line)
            if row.get("rc") in (0, 1):  # confirmed or not: both are finished runs
                finds[row["dtype"]] = row["find_wall_s"]
    if {"bfloat16", "float32"} <= set(finds):
        out["main job find, bfloat16 over float32 (warm)"] = [
            (f"{finds['bfloat16']:.1f} s / {finds['float32']:.1f} s", finds["bfloat16"] / finds["float32"])]
    return out


def report(folder: Path) -> str:
    _, protocol, header = _records(folder)
    lines = [f"GPU targets: {header.get('device')}, torch {header.get('torch')} (CUDA {header.get('cuda')}), "
             f"bfloat16; measured peak {header.get('measured_bf16_matmul_tflops')} TFLOP/s, copy "
             f"{header.get('measured_bandwidth_gbs')} GB/s"]
    found = measured(folder)
    for name, (sense, target) in TARGETS.items():
        values = found.get(name, [])
        if not values:
            lines.append(f"  {name}: not measured (see the logs)")
            continue
        worst = min(v for _, v in values) if sense == ">=" else max(v for _, v in values)
        met = worst >= target if sense == ">=" else worst <= target
        lines.append(f"  {name}: {'MET' if met else 'NOT MET'} (target {sense} {target:g}; worst {worst:.3g})")
        lines += [f"      {where}: {value:.3g}" for where, value in values]
    if protocol is not None:
        lines.append(f"  protocol limit at 100% of the peak: {protocol['limit_minutes_at_peak']} min; without the "
                     f"layer cache {protocol['exact_minutes_without_layer_cache']} min; layer cache checkpoints "
                     f"{protocol['layer_cache_checkpoints']}; checks {protocol['checks']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    text = report(parser.parse_args(argv).folder)
    print(text)
    return text


if __name__ == "__main__":
    main()
