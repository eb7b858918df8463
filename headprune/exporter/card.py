"""The model card (README.md) of an export, with Hub-style YAML metadata."""

from __future__ import annotations

import json


def _yaml_value(value: object) -> str:
    return json.dumps(value)  # JSON scalars and lists are valid YAML flow values


def render_card(record: dict) -> str:
    """README.md for an export folder, from its verification record."""
    source, removed, layout, fmt = record["source"], record["removed_heads"], record["layout"], record["format"]
    verdict = record.get("find_verdict")
    meta: dict = {"library_name": "transformers" if fmt == "safetensors" else "onnx",
                  "tags": ["headprune", "pruned", f"headprune-{layout}", "attention-head-pruning"]}
    if source.get("hub_id"):
        meta["base_model"] = source["hub_id"]
    if source.get("license"):
        meta["license"] = source["license"]
    if record.get("model_index"):
        meta["model-index"] = record["model_index"]
    lines = ["---"]
    for key, value in meta.items():
        if key == "model-index":
            lines.append("model-index: " + json.dumps(value))
        elif isinstance(value, list):
            lines.append(f"{key}:")
            lines += [f"- {_yaml_value(v)}" for v in value]
        else:
            lines.append(f"{key}: {_yaml_value(value)}")
    lines += ["---", "", f"# {source['name']}, {len(removed)} attention heads removed", "",
              f"Made with [headprune](https://pypi.org/project/headprune/): the attention heads "
              f"`{','.join(removed)}` of `{source['name']}` were removed ({layout} layout, {record['ablation']} "
              "ablation), and the result was verified against the original model with those heads masked.", "",
              "| | original | pruned |", "|---|---|---|",
              f"| parameters | {record['parameters']['before']:,} | {record['parameters']['after']:,} |",
              f"| weight bytes | {record['bytes']['before']:,} | {record['bytes']['after']:,} |", ""]
    check = record["verification"]
    lines += ["## Verification", "",
              f"- Largest logit difference to the masked original: {check['max_abs_logit_diff']:.2e} "
              f"(allowed {check['allowed_diff']:.1e}: {check['tolerance']:.0e} x the largest |logit|).",]
    task = check.get("task")
    if task:
        def fmt_metric(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.2%}" if task_metric == "accuracy" else f"{v:.4f}"
        task_metric = "accuracy" if record.get("task_kind") != "text" else "mean NLL"
        lines.append(f"- `{task['task']}` (n={task['n']}, {task_metric}): original {fmt_metric(task['intact'])}, "
                     f"masked {fmt_metric(task['masked'])}, this model {fmt_metric(task['exported'])} "
                     f"({task['disagreements']} answers differ from the masked model; measured on "
                     f"{task['measured_on']}).")
    if verdict:
        lines += ["", "## Held-out result from `headprune find`", "",
                  f"Discovery-selected set, tested on {verdict['n']} held-out examples the search never saw: "
                  f"accuracy {verdict['accuracy_before']:.2%} -> {verdict['accuracy_after']:.2%} "
                  f"(difference {verdict['difference']:+.2%}, 95% CI [{verdict['ci95'][0]:+.2%}, "
                  f"{verdict['ci95'][1]:+.2%}], exact McNemar p = {verdict['p_value']:.3g}): "
                  + ("**confirmed**." if verdict["confirmed"] else "**not confirmed** (no improvement is claimed).")]
    lines += ["", "## How to load", ""]
    if fmt == "onnx":
        lines += ["```python", "import onnxruntime", 'session = onnxruntime.InferenceSession("model.onnx")',
                  "# inputs: input_ids, attention_mask" + ("" if record["encoder"] else ", position_ids (int64)"),
                  "```"]
    elif layout == "sliced":
        auto = "AutoModel" if record["encoder"] else "AutoModelForCausalLM"
        lines += ["```python", f"from transformers import {auto}, AutoTokenizer",
                  f'model = {auto}.from_pretrained("PATH_OR_REPO", trust_remote_code=True)',
                  "# or, with headprune installed: headprune.load(\"PATH\")", "```", "",
                  "Layers have different head counts, which stock transformers classes cannot express; the small "
                  "`modeling_headprune.py` next to the weights (it imports only torch and transformers) rebuilds "
                  "the shapes recorded in `config.json` under `headprune`."]
    else:
        auto = "AutoModel" if record["encoder"] else "AutoModelForCausalLM"
        lines += ["```python", f"from transformers import {auto}", f'model = {auto}.from_pretrained("PATH_OR_REPO")',
                  "```"]
    lines += ["", "Per-layer layouts: " + ", ".join(f"L{i}: {p['layout']}" for i, p in
                                                      enumerate(record.get("layers", [])) if p["layout"] != "unchanged")
              if record.get("layers") else "", ""]
    return "\n".join(lines)
