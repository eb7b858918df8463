"""What a user of the built package runs, run by the package alone: ``scripts/test_wheel.sh`` installs the wheel into
a fresh virtual environment and runs this file there, copied into an empty folder outside the source tree.

    python wheel_smoke.py VERSION

It checks that ``headprune`` is the installed one (not a checkout), then runs ``headprune --version``,
``headprune tasks``, a ``find`` on a tiny Llama saved as a user's folder (``headprune.testing``: built in code,
nothing downloaded) with a task file, and ``export``s of its result to sliced safetensors, GGUF (run in llama.cpp
before it is written) and ONNX, each loaded back (``headprune.load``; ONNX in ONNX Runtime) and compared with the
masked original's logits. Any step that fails (a file the wheel lacks shows up here) exits non-zero, naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import headprune

HEADS = "run/result.json"
FIND = ["--discovery", "24", "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1",
        "--batch-size", "8", "--extend", "0", "--out", "run"]
# Each export: its options, the folder, and what is loaded back: headprune.load reads safetensors and GGUF (dense:
# transformers reads the llama architecture back, not the deci one of a sliced file, which export runs in
# llama.cpp before writing); an ONNX file loads in ONNX Runtime, as its card says.
EXPORTS = {"safetensors": ([], "pruned", "pruned"),
           "gguf": (["--layout", "dense"], "pruned-gguf", "pruned-gguf/model.gguf"),
           "onnx": ([], "pruned-onnx", "pruned-onnx/model.onnx")}


def onnx_logits(path: str, tokens: Any) -> Any:
    """The logits of ONNX Runtime's session on ``path``, fed as the export's card says (a decoder's key/value
    cache inputs, where it has them, empty)."""
    import numpy as np
    import onnxruntime
    import torch

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    ids = tokens.numpy().astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.arange(ids.shape[1])[None]}
    for given in session.get_inputs():
        if given.name.startswith("past_key_values."):
            feeds[given.name] = np.zeros((1, given.shape[1], 0, given.shape[3]), dtype=np.float32)
    return torch.from_numpy(session.run(["logits"], {k: v for k, v in feeds.items()
                                                     if k in {i.name for i in session.get_inputs()}})[0])


def step(name: str, *args: str, codes: tuple[int, ...] = (0,)) -> str:
    """Run the installed ``headprune`` console script; its stdout, or exit 1 naming the step."""
    started = time.monotonic()
    done = subprocess.run([str(Path(sys.executable).parent / "headprune"), *args], capture_output=True, text=True)
    print(f"{name}: exit {done.returncode}, {time.monotonic() - started:.1f} s", flush=True)
    if done.returncode not in codes:
        sys.exit(f"wheel smoke test: {name} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main(version: str, general_texts: int) -> None:
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    where = Path(headprune.__file__).resolve()
    if site not in where.parents:
        sys.exit(f"wheel smoke test: headprune imports from {where}, not the installed package in {site}")
    if headprune.__version__ != version:
        sys.exit(f"wheel smoke test: the installed headprune is {headprune.__version__}, the wheel {version}")
    said = step("headprune --version", "--version")
    if version not in said:
        sys.exit(f"wheel smoke test: headprune --version says {said.strip()!r}, not {version}")
    listing = step("headprune tasks", "tasks")
    if not all(name in listing for name in ("arithmetic", "sentiment", "general")):
        sys.exit(f"wheel smoke test: headprune tasks lists no built-in tasks:\n{listing}")
    from headprune.tasks import load_task

    general = load_task("general")  # the --guard general sample: package data of the wheel, whole
    if len(general) != general_texts:
        sys.exit(f"wheel smoke test: the built-in general task has {len(general)} texts, the tree's "
                 f"{general_texts}")

    import torch

    from headprune.tasks import write_jsonl_task
    from headprune.testing import bpe_tokenizer, random_choice_task, tiny_model

    tokenizer = bpe_tokenizer()
    tiny_model("llama", len(tokenizer), seed=0).save_pretrained("model")
    tokenizer.save_pretrained("model")
    write_jsonl_task(random_choice_task(40, seed=3), Path("task.jsonl"))
    # A random model has nothing to find: not confirmed (exit 1) is a finished run, and export then needs
    # --allow-unconfirmed.
    step("find", "find", "model", "--task", "task.jsonl", *FIND, codes=(0, 1))
    heads = json.loads(Path(HEADS).read_text())["finalists"][0]["heads"]

    original = headprune.load("model")
    tokens = torch.tensor([tokenizer("the film is a dull delight")["input_ids"]])
    with torch.no_grad(), headprune.ablated(original, headprune.parse_heads(heads)):
        masked = original.model(tokens).logits
    for fmt, (options, out, loads) in EXPORTS.items():
        step(f"export --format {fmt}", "export", "model", "--heads", HEADS, "--allow-unconfirmed", "--format", fmt,
             *options, "--out", out)
        record = json.loads(Path(out, "headprune_export.json").read_text())
        if record["removed_heads"] != heads:
            sys.exit(f"wheel smoke test: the {fmt} export removed {record['removed_heads']}, not {heads}")
        started = time.monotonic()
        if fmt == "onnx":
            how, logits = "onnxruntime.InferenceSession", onnx_logits(loads, tokens)
        else:
            loaded = headprune.load(loads)
            with torch.no_grad():
                logits = loaded.model(tokens).logits
            how = f"headprune.load, a {type(loaded.model).__name__}"
        gap = (logits - masked).abs().max().item()
        print(f"loaded {loads} ({how}): {time.monotonic() - started:.1f} s, max |logit - masked original's| "
              f"{gap:.2e}", flush=True)
        if gap > 1e-4:
            sys.exit(f"wheel smoke test: the {fmt} export loaded back differs from the masked original by {gap:.2e}")
    print(f"wheel smoke test: headprune {version} from {where.parent} passed", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: wheel_smoke.py VERSION GENERAL_TEXTS (the tree's headprune/tasks/data/general.jsonl lines)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here needs the Hub
    main(sys.argv[1], int(sys.argv[2]))
