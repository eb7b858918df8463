"""Every bad input through the command line: exit 2, one line on stderr naming what is wrong, nothing written.

Each row of ``CASES`` is one bad input a user or a hostile file can give: task files (nested JSON, huge numbers,
lone surrogates, empty or over-long prompts, FIFOs and devices, nonsense decoding budgets), broken models (NaN
weights, a config.json that disagrees with the weights, zero heads, negative sizes), corrupt journals, bad numbers
in the environment, options that do not apply to the chosen mode, a plan too large to run, and click's own parse
errors. Before these checks most of them exited 3 (an internal error), 0 (scored as if fine) or never ended.
``tests/test_fuzz.py`` generates more of each class.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from helpers import build_tiny, save_folder
from helpers.cli import invoke


@dataclass(frozen=True)
class Inputs:
    """The files the bad inputs are made of (built once per module)."""

    root: Path

    def __getattr__(self, name: str) -> str:  # p.good, p.ok_jsonl, p.fifo_json: a path under root, as a string
        for suffix in ("jsonl", "json"):
            if name.endswith("_" + suffix):
                name = name[: -len(suffix) - 1] + "." + suffix
        return str(self.root / name)

    def gguf_file(self, name: str) -> str:
        return str(self.root / f"{name}.gguf")


def _row(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def _variant(root: Path, name: str, tokenizer, config: dict | None = None, weights=None,  # noqa: ANN001
             layers: int = 2) -> None:
    lm = build_tiny("llama", tokenizer, seed=1, layers=layers)
    if weights is not None:
        with torch.no_grad():
            weights(lm.model)
    folder = save_folder(lm.model, tokenizer, root / name)
    if config:
        saved = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**saved, **config}))


@pytest.fixture(scope="module")
def p(tmp_path_factory, tokenizer) -> Inputs:  # noqa: ANN001
    root = tmp_path_factory.mktemp("bad-inputs")
    _variant(root, "good", tokenizer)
    _variant(root, "wide", tokenizer, layers=16)  # 64 heads
    _variant(root, "nan", tokenizer, weights=lambda m: [w.fill_(float("nan")) for w in m.parameters()])
    for name, config in (("more_layers", {"num_hidden_layers": 3}), ("fewer_layers", {"num_hidden_layers": 1}),
                         ("zero_heads", {"num_attention_heads": 0}), ("zero_layers", {"num_hidden_layers": 0}),
                         ("negative_hidden", {"hidden_size": -32}),
                         ("wrong_shapes", {"hidden_size": 64, "head_dim": 16}), ("null_hidden", {"hidden_size": None}),
                         ("kv_heads", {"num_key_value_heads": 3})):
        _variant(root, name, tokenizer, config)
    shutil.copytree(root / "good", root / "list_config")
    (root / "list_config" / "config.json").write_text("[1, 2]")
    for name, record in (("record_string", "x"), ("record_pipeline", {"base_class": "pipeline"}),
                         ("record_other_family", {"base_class": "GPT2LMHeadModel", "layers": [], "head_dim": 8,
                                                  "paths": {}})):
        _variant(root, name, tokenizer, {"headprune": record})
    _pickled_code(root / "good", root / "pickle4")
    files = {
        "ok": "".join(_row(prompt=f"the film is {i}", choices=[" positive", " negative"], answer=i % 2)
                      for i in range(40)),
        "gen": "".join(_row(prompt=f"{i} + 1 =", target=str(i + 1)) for i in range(8)),
        "nested": "[" * 100_000 + "]" * 100_000 + "\n",
        "nested_value": '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n",
        "bigint": '{"prompt": "a", "choices": [" x", " y"], "answer": ' + "9" * 5000 + "}\n",
        "bigfloat": '{"prompt": "a", "choices": [" x", " y"], "answer": 1e999}\n',
        "nan_json": '{"prompt": "a", "choices": [" x", " y"], "answer": NaN}\n',
        "surrogate": '{"prompt": "a \\ud800 b", "choices": [" x", " y"], "answer": 0}\n',
        "empty_prompt": _row(prompt="", choices=[" x", " y"], answer=0),
        "empty_prompt_gen": _row(prompt="", target="1"),
        "long_prompt": _row(prompt="the film is " * 400, choices=[" x", " y"], answer=0),
        "huge_line": _row(prompt="x" * 20_000_000, choices=[" x", " y"], answer=0),
        "same_choices": _row(prompt="a", choices=[" x", " x"], answer=0),
    }
    for name, text in files.items():
        (root / f"{name}.jsonl").write_text(text, encoding="utf-8")
    (root / "raw_surrogate.jsonl").write_bytes(b'{"prompt": "a \xed\xa0\x80", "choices": [" x", " y"], "answer": 0}\n')
    os.mkfifo(root / "fifo.jsonl")
    os.mkfifo(root / "fifo.json")
    run = invoke("find", str(root / "good"), "--task", str(root / "ok.jsonl"), *SMALL_FIND, "--out", str(root / "run"))
    assert run.exit_code in (0, 1), run.output
    done = invoke("export", str(root / "good"), "--heads", "L0.H0", "--out", str(root / "export"))
    assert done.exit_code == 0, done.output
    _fourth_pass(root)
    return Inputs(root)


def _fourth_pass(root: Path) -> None:
    """The fourth pass's inputs: GGUF files with tampered head counts, find results edited by hand or made where
    their task file lay elsewhere, and a run folder whose result.json is a link."""
    import gguf

    done = invoke("export", str(root / "good"), "--heads", "L0.H0", "--layout", "dense", "--format", "gguf",
                  "--out", str(root / "gguf"))
    assert done.exit_code == 0, done.output
    for name, key, value in (("heads3", "llama.attention.head_count", 3), ("heads0", "llama.attention.head_count", 0),
                             ("kv3", "llama.attention.head_count_kv", 3)):
        shutil.copy(root / "gguf" / "model.gguf", root / f"{name}.gguf")
        field = gguf.GGUFReader(root / f"{name}.gguf", "r+").fields[key]
        field.parts[field.data[0]][0] = value  # written in place, through the file's memory map
    result = json.loads((root / "run" / "result.json").read_text())
    for name, edit in (("edited", lambda r: r["finalists"][0].update(heads=["L1.H3"])),
                       ("undigested", lambda r: r.pop("digest"))):
        (root / name).mkdir()
        changed = json.loads(json.dumps(result))
        edit(changed)
        (root / name / "result.json").write_text(json.dumps(changed, indent=2))
    (root / "moving.jsonl").write_text((root / "ok.jsonl").read_text())
    moved = invoke("find", str(root / "good"), "--task", str(root / "moving.jsonl"), *SMALL_FIND, "--out",
                   str(root / "moved_run"))
    assert moved.exit_code in (0, 1), moved.output
    (root / "moving.jsonl").rename(root / "moved.jsonl")  # the run's task now lies elsewhere
    shutil.copytree(root / "run", root / "linked_run", ignore=shutil.ignore_patterns(".*"))
    (root / "linked_run" / "result.json").unlink()
    (root / "linked_run" / "result.json").symlink_to(root / "ok.jsonl")


SMALL_FIND = ["--discovery", "20", "--heldout", "20", "--nominees", "2", "--max-heads", "2", "--finalists", "1"]
LONG = "x" * 5000  # a name no filesystem takes (NAME_MAX is 255 bytes)


def _pickled_code(model: Path, folder: Path) -> None:
    """``model`` with its weights as a ``pytorch_model.bin`` whose unpickling would run code, written in pickle
    protocol 4 (torch warns in two lines of any protocol but its own 2 before it refuses the file)."""
    from safetensors.torch import load_file

    class Code:
        def __reduce__(self):  # noqa: ANN204
            return (exec, (f"open({str(folder / 'ran')!r}, 'w').close()",))

    shutil.copytree(model, folder)
    state = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({**state, "code": Code()}, folder / "pytorch_model.bin", pickle_protocol=4)


def _resumed(p: Inputs, *changes: str, model: str | None = None) -> list[str]:
    """The fixture's find run copied and resumed with ``changes`` to its options (click keeps an option's last
    value), or with the model given as ``model``."""
    folder = Path(p.root) / f"resume-{len(list(Path(p.root).glob('resume-*')))}"
    shutil.copytree(Path(p.root) / "run", folder)
    (folder / "result.json").unlink()
    return ["find", model or p.good, "--task", p.ok_jsonl, *SMALL_FIND, *changes, "--out", str(folder), "--resume"]


def _journal(p: Inputs, edit) -> list[str]:  # noqa: ANN001
    """A copy of the fixture's find run with its journal edited by ``edit`` (lines in, lines out), and the
    arguments that resume it."""
    folder = Path(p.root) / f"resume-{len(list(Path(p.root).glob('resume-*')))}"
    shutil.copytree(Path(p.root) / "run", folder, ignore=shutil.ignore_patterns(".headprune.lock"))
    journal = folder / "journal.jsonl"
    edited = edit(journal.read_text().splitlines())
    journal.write_bytes(edited if isinstance(edited, bytes) else ("\n".join(edited) + "\n").encode())
    for name in ("result.json", "report.md"):
        (folder / name).unlink()
    return ["find", p.good, "--task", p.ok_jsonl, *SMALL_FIND, "--out", str(folder), "--resume"]


def _edit_entry(key: str, change) -> object:  # noqa: ANN001
    def edit(lines: list[str]) -> list[str]:
        rows = [json.loads(line) for line in lines]
        for row in rows:
            if row.get("key") == key:
                change(row)
        return [json.dumps(row) for row in rows]
    return edit


def _flip(row: dict) -> None:
    row["correct"] = "".join("1" if c == "0" else "0" for c in row["correct"])


# (id, arguments from the inputs, environment, what the one line must say)
CASES = [
    # task files
    ("nested JSON line", lambda p: ["eval", p.good, "--task", p.nested_jsonl], {}, "nested too deeply"),
    ("nested JSON value", lambda p: ["eval", p.good, "--task", p.nested_value_jsonl], {}, "nested too deeply"),
    ("5000-digit answer", lambda p: ["eval", p.good, "--task", p.bigint_jsonl], {}, "a number too long to read"),
    ("1e999 answer", lambda p: ["eval", p.good, "--task", p.bigfloat_jsonl], {}, '"answer" must be an index'),
    ("NaN in a task file", lambda p: ["eval", p.good, "--task", p.nan_json_jsonl], {}, "NaN is not JSON"),
    ("lone surrogate", lambda p: ["eval", p.good, "--task", p.surrogate_jsonl], {}, "lone surrogate"),
    ("surrogate bytes", lambda p: ["eval", p.good, "--task", p.raw_surrogate_jsonl], {}, "not UTF-8"),
    ("empty prompt", lambda p: ["eval", p.good, "--task", p.empty_prompt_jsonl], {}, "non-empty string"),
    ("empty generate prompt", lambda p: ["eval", p.good, "--task", p.empty_prompt_gen_jsonl], {}, "non-empty"),
    ("prompt longer than the positions", lambda p: ["eval", p.good, "--task", p.long_prompt_jsonl], {},
     "more than the model's 256 positions (max_position_embeddings)"),
    ("generation past the positions", lambda p: ["eval", p.good, "--task", p.gen_jsonl + ":max_new_tokens=300"],
     {}, "plus 300 to generate"),
    ("20 MB prompt line", lambda p: ["eval", p.good, "--task", p.huge_line_jsonl], {}, "more than the limit of"),
    ("two identical choices", lambda p: ["eval", p.good, "--task", p.same_choices_jsonl], {}, "must differ"),
    ("/dev/zero as a task", lambda p: ["eval", p.good, "--task", "/dev/zero"], {}, "not a regular file"),
    ("FIFO as a task", lambda p: ["eval", p.good, "--task", p.fifo_jsonl], {}, "not a regular file"),
    ("FIFO as a held-out task", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--heldout-task", p.fifo_jsonl],
     {}, "not a regular file"),
    ("FIFO as a control", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--control", p.fifo_jsonl], {},
     "not a regular file"),
    ("FIFO as a verify task", lambda p: ["export", p.good, "--heads", "L0.H0", "--verify-task", p.fifo_jsonl],
     {}, "not a regular file"),
    ("FIFO as a result", lambda p: ["export", p.good, "--heads", p.fifo_json], {}, "not a regular file"),
    ("folder as a task", lambda p: ["eval", p.good, "--task", str(p.root)], {}, "not a regular file"),
    ("max_new_tokens=0", lambda p: ["eval", p.good, "--task", p.gen_jsonl + ":max_new_tokens=0"], {},
     "max_new_tokens must be a whole number from 1"),
    ("max_new_tokens=-3", lambda p: ["eval", p.good, "--task", p.gen_jsonl + ":max_new_tokens=-3"], {},
     "max_new_tokens must be"),
    ("max_new_tokens=100000", lambda p: ["eval", p.good, "--task", p.gen_jsonl + ":max_new_tokens=100000"], {},
     "HEADPRUNE_MAX_NEW_TOKENS"),
    ("max_new_tokens on a choice file", lambda p: ["eval", p.good, "--task", p.ok_jsonl + ":max_new_tokens=5"], {},
     "max_new_tokens applies to generate and code tasks"),
    ("length_normalize=maybe", lambda p: ["eval", p.good, "--task", p.ok_jsonl + ":length_normalize=maybe"], {},
     "must be true or false"),
    ("length_normalize on a generate file", lambda p: ["eval", p.good, "--task", p.gen_jsonl + ":length_normalize=1"],
     {}, "length_normalize applies to choice tasks"),
    ("an empty task", lambda p: ["eval", p.good, "--task", ""], {}, "the task is empty"),
    ("sentiment shots=5000", lambda p: ["eval", p.good, "--task", "sentiment:shots=5000"], {}, "at most 100"),
    ("arithmetic shots=5000", lambda p: ["eval", p.good, "--task", "arithmetic:shots=5000", "--limit", "2"], {},
     "positions"),
    ("arithmetic n=10^12", lambda p: ["eval", p.good, "--task", "arithmetic:n=1000000000000,digits=20"], {},
     "at most 10,000,000"),
    ("arithmetic digits=5000", lambda p: ["eval", p.good, "--task", "arithmetic:digits=5000"], {}, "at most 100"),
    ("sentiment n=1e12", lambda p: ["eval", p.good, "--task", "sentiment:n=1e12"], {}, "must be an integer"),
    ("task file over the size limit", lambda p: ["eval", p.good, "--task", p.huge_line_jsonl],
     {"HEADPRUNE_MAX_TASK_MB": "1"}, "HEADPRUNE_MAX_TASK_MB"),
    # broken models
    ("NaN weights: eval", lambda p: ["eval", p.nan, "--task", p.ok_jsonl], {}, "NaN on the first batch"),
    ("NaN weights: eval --heads", lambda p: ["eval", p.nan, "--task", p.ok_jsonl, "--heads", "L0.H0"], {}, "NaN"),
    ("NaN weights: find", lambda p: ["find", p.nan, "--task", p.ok_jsonl, *SMALL_FIND], {}, "NaN"),
    ("NaN weights: export", lambda p: ["export", p.nan, "--heads", "L0.H0"], {}, "NaN"),
    ("config with more layers: export", lambda p: ["export", p.more_layers, "--heads", "L0.H0"], {},
     "initialised at random (model.layers.2."),
    ("config with more layers: eval", lambda p: ["eval", p.more_layers, "--task", p.ok_jsonl], {},
     "config.json and the weights disagree"),
    ("config with fewer layers", lambda p: ["eval", p.fewer_layers, "--task", p.ok_jsonl], {},
     "not used by LlamaForCausalLM"),
    ("config with 0 heads", lambda p: ["eval", p.zero_heads, "--task", p.ok_jsonl], {}, "num_attention_heads must"),
    ("config with 0 layers", lambda p: ["eval", p.zero_layers, "--task", p.ok_jsonl], {}, "num_hidden_layers must"),
    ("negative hidden size", lambda p: ["eval", p.negative_hidden, "--task", p.ok_jsonl], {}, "hidden_size must"),
    ("wrong tensor shapes", lambda p: ["eval", p.wrong_shapes, "--task", p.ok_jsonl], {},
     "shapes disagree with config.json (lm_head.weight: checkpoint (320, 32) vs config (320, 64)"),
    ("3 key/value heads for 4", lambda p: ["eval", p.kv_heads, "--task", p.ok_jsonl], {}, "must divide"),
    ("config.json a list", lambda p: ["eval", p.list_config, "--task", p.ok_jsonl], {}, "JSON object"),
    ("hidden size null", lambda p: ["eval", p.null_hidden, "--task", p.ok_jsonl], {},
     "Field 'hidden_size' expected int"),
    # corrupt journals, resumed
    ("journal: lines cut", lambda p: _journal(p, lambda lines: lines[:1] + [x[: len(x) // 2] for x in lines[1:]]),
     {}, "corrupt at line 2"),
    ("journal: margins a string", lambda p: _journal(p, _edit_entry("heldout|", lambda r: r.update(margins="x"))),
     {}, "corrupt at line"),
    ("journal: margins missing", lambda p: _journal(p, _edit_entry("heldout|", lambda r: r.pop("margins"))), {},
     "corrupt at line"),
    ("journal: baseline edited", lambda p: _journal(p, _edit_entry("discovery|", _flip)), {}, "corrupt at line 2"),
    ("journal: settings not an object", lambda p: _journal(p, lambda lines: ["[1, 2]", *lines[1:]]), {},
     "not a headprune journal"),
    ("journal: binary", lambda p: _journal(p, lambda lines: b"\xff\xfe\x00garbage"), {}, "not readable text"),
    ("journal: nested line", lambda p: _journal(p, lambda lines: [lines[0], "[" * 100_000, *lines[1:]]), {},
     "corrupt at line 2"),
    # numbers in the environment
    ("HEADPRUNE_LAYER_CACHE_MB=abc", lambda p: ["eval", p.good, "--task", p.ok_jsonl],
     {"HEADPRUNE_LAYER_CACHE_MB": "abc"}, "HEADPRUNE_LAYER_CACHE_MB='abc' is not an integer"),
    ("HEADPRUNE_LAYER_CACHE_MB=-5", lambda p: ["tasks"], {"HEADPRUNE_LAYER_CACHE_MB": "-5"}, "at least 0"),
    ("HEADPRUNE_DIST_TIMEOUT_MIN=x", lambda p: ["tasks"], {"HEADPRUNE_DIST_TIMEOUT_MIN": "x"}, "not a number"),
    ("HEADPRUNE_MAX_SETS=0", lambda p: ["tasks"], {"HEADPRUNE_MAX_SETS": "0"}, "at least 1"),
    ("HEADPRUNE_MAX_LINE_CHARS=1e6", lambda p: ["tasks"], {"HEADPRUNE_MAX_LINE_CHARS": "1e6"}, "not an integer"),
    ("HEADPRUNE_CPU_LINEAR=mkl", lambda p: ["tasks"], {"HEADPRUNE_CPU_LINEAR": "mkl"}, "use one of auto, onednn"),
    ("HEADPRUNE_SANDBOX_MODE=strong", lambda p: ["tasks"], {"HEADPRUNE_SANDBOX_MODE": "strong"},
     "use one of auto, namespaces, process, plain"),
    ("--sandbox-mode without code execution", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--sandbox-mode",
                                                         "plain"], {}, "--sandbox-mode applies only with"),
    ("WORLD_SIZE=abc", lambda p: ["find", p.good, "--task", p.ok_jsonl, *SMALL_FIND], {"WORLD_SIZE": "abc"},
     "WORLD_SIZE='abc' is not an integer"),
    # options that cannot work, or do not apply
    ("--max-shard-size 10^400 GB", lambda p: ["export", p.good, "--heads", "L0.H0", "--max-shard-size",
                                              "1" + "0" * 400 + "GB"], {}, "--max-shard-size must be a size"),
    ("--max-shard-size 1e400", lambda p: ["export", p.good, "--heads", "L0.H0", "--max-shard-size", "1e400"], {},
     "--max-shard-size must be a size"),
    ("--candidates with --screen exact", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--candidates", "5"], {},
     "--candidates applies only with --screen attribution or halving"),
    ("--gguf-type with safetensors", lambda p: ["export", p.good, "--heads", "L0.H0", "--gguf-type", "q8_0"], {},
     "--gguf-type applies only with --format gguf"),
    ("--pick with a head list", lambda p: ["export", p.good, "--heads", "L0.H0", "--pick", "2"], {},
     "--pick applies only to heads from a find result"),
    ("--allow-unconfirmed with a head list", lambda p: ["export", p.good, "--heads", "L0.H0",
                                                        "--allow-unconfirmed"], {}, "--allow-unconfirmed applies"),
    ("--control-limit without --control", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--control-limit", "9"],
     {}, "--control-limit applies only with --control"),
    ("--finalists with compress", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--objective", "compress",
                                             "--finalists", "3"], {}, "--finalists applies only with --objective"),
    ("--ablation mean without --heads", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--ablation", "mean"], {},
     "--ablation applies only with --heads"),
    ("--device with --device-map", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--device", "cpu",
                                              "--device-map", "auto"], {}, "--device applies only without"),
    ("--nominees 64 --max-heads 12", lambda p: ["find", p.wide, "--task", p.ok_jsonl, "--discovery", "20",
                                                "--heldout", "20", "--nominees", "64", "--max-heads", "12"], {},
     "--nominees (64) and --max-heads (12) with --extend (1) make the joint search evaluate"),
    ("--alpha nan", lambda p: ["find", p.good, "--task", p.ok_jsonl, *SMALL_FIND, "--alpha", "nan"], {},
     "--alpha must be between 0 and 1"),
    ("--tolerance nan", lambda p: ["export", p.good, "--heads", "L0.H0", "--tolerance", "nan"], {},
     "--tolerance must be between"),
    ("push: a non-ASCII token", lambda p: ["push", str(p.root / "export"), "--repo-id", "a/b", "--token", "tök€n"],
     {"HF_ENDPOINT": "http://127.0.0.1:9"}, "an HTTP header cannot carry"),
    # click's own parse errors
    ("unknown option", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--bogus"], {}, "No such option"),
    ("unknown top-level option", lambda p: ["--bogus"], {}, "No such option"),
    ("missing --task", lambda p: ["eval", p.good], {}, "Missing option '--task'"),
    ("missing MODEL", lambda p: ["find"], {}, "Missing argument 'MODEL'"),
    ("not an integer", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--discovery", "abc"], {}, "not a valid"),
    ("not a float", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--alpha", "x"], {}, "not a valid float"),
    ("not a choice", lambda p: ["export", p.good, "--heads", "L0.H0", "--format", "zip"], {}, "is not one of"),
    ("extra argument", lambda p: ["tasks", "extra"], {}, "unexpected extra argument"),
    ("no such command", lambda p: ["frobnicate"], {}, "No such command"),
    ("malformed head list", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--heads", "L0"], {}, "malformed"),
    ("negative seed", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--seed", "-1"], {}, "not in the range"),
    ("batch size 0", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--batch-size", "0"], {}, "positive number"),
    ("push without --repo-id", lambda p: ["push", p.good], {}, "Missing option '--repo-id'"),
    ("option without its value", lambda p: ["eval", p.good, "--task"], {}, "requires an argument"),
    # paths longer than the system takes: exit 3 before (OSError: File name too long)
    ("5000-character task path", lambda p: ["eval", p.good, "--task", f"{p.root}/{LONG}.jsonl"], {},
     "a path is too long for this system (File name too long"),
    ("5000-character model path", lambda p: ["eval", f"{p.root}/{LONG}", "--task", p.ok_jsonl], {},
     "a path is too long for this system"),
    ("5000-character control path", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--control", LONG], {},
     "a path is too long for this system"),
    ("5000-character verify task", lambda p: ["export", p.good, "--heads", "L0.H0", "--verify-task", LONG], {},
     "a path is too long for this system"),
    ("5000-character push folder", lambda p: ["push", f"{p.root}/{LONG}", "--repo-id", "a/b", "--dry-run"], {},
     "a path is too long for this system"),
    ("eval --out of 5000 characters", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--out", LONG], {},
     "an output's name may have here"),
    ("find --out of 5000 characters", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--out", LONG], {},
     "an output's name may have here"),
    ("export --out of 250 characters", lambda p: ["export", p.good, "--heads", "L0.H0", "--out", "y" * 250], {},
     "has 250 bytes, more than the"),
    # a malformed headprune record in config.json: exit 3 before (TypeError)
    ("headprune record a string", lambda p: ["eval", p.record_string, "--task", p.ok_jsonl], {},
     "headprune must be the record of a sliced headprune export (an object), not 'x'"),
    ("headprune base_class a function", lambda p: ["eval", p.record_pipeline, "--task", p.ok_jsonl], {},
     "headprune.base_class must name the transformers class of a llama model that headprune sliced (e.g. "
     "LlamaForCausalLM), not 'pipeline'"),
    ("headprune base_class of another family", lambda p: ["eval", p.record_other_family, "--task", p.ok_jsonl], {},
     "not 'GPT2LMHeadModel'"),
    # torch's two-line pickle-protocol warning: folded into the one line (a real process shows it: see
    # tests/test_export_unknown_class.py)
    ("pickle protocol 4 that runs code", lambda p: ["eval", p.pickle4, "--task", p.ok_jsonl], {},
     "it is written with pickle protocol 4"),
    # a task option given twice: the last value silently won before
    ("arithmetic n given twice", lambda p: ["eval", p.good, "--task", "arithmetic:n=5,n=7"], {},
     "task option n is given twice (n=5, n=7)"),
    ("file option given twice", lambda p: ["eval", p.good, "--task", p.ok_jsonl + ":length_normalize=1,"
                                                                             "length_normalize=0"], {},
     "task option length_normalize is given twice"),
    # resume refusals: the option and both values (split hashes, or a path twice, before)
    ("resume with another --seed", lambda p: _resumed(p, "--seed", "3"), {}, "--seed 0 then, 3 now"),
    ("resume with another --discovery", lambda p: _resumed(p, "--discovery", "15"), {},
     "--discovery 20 then, 15 now"),
    ("resume with another --dtype", lambda p: _resumed(p, "--dtype", "bfloat16"), {},
     "the environment differs from its own (--dtype float32 then, bfloat16 now)"),
    ("resume with the model spelled otherwise", lambda p: _resumed(p, model=p.good + "/"), {},
     "good/ now, as "),  # and "(the same folder: give it as then)": see the test below
    # outputs on inputs (tests/test_outputs_off_inputs.py has one per command)
    ("eval --out inside the model", lambda p: ["eval", p.good, "--task", p.ok_jsonl, "--limit", "2", "--out",
                                               p.good + "/model.safetensors"], {}, "lies inside the model"),
    ("find --out the model", lambda p: ["find", p.good, "--task", p.ok_jsonl, "--out", p.good], {}, "is the model"),
    # `~user` of no user: Path.expanduser raises there (exit 3 before); a shell leaves such a path as written.
    ("model under an unknown user's home", lambda p: ["eval", "~0", "--task", p.ok_jsonl], {}, "'~0' not found"),
    ("task under an unknown user's home", lambda p: ["eval", p.good, "--task", "~nosuchuser0/t.jsonl"], {},
     "unknown task"),
    # the fourth pass: a GGUF input's head counts (exit 3 before: StrictDataclassClassValidationError), a find result
    # edited by hand (exported as a false card before), or made where its task file lay elsewhere (refused even with
    # --verify-task before), a link at a run's result.json (said that nothing moved while two files had), a head
    # pruned twice (a copy, exit 0, before), a fresh-example count no task has (capped in silence before)
    ("GGUF head count that does not divide the width", lambda p: ["export", p.gguf_file("heads3"), "--heads",
                                                                  "L0.H1"], {},
     "llama.attention.head_count is 3: blk.0.attn_q.weight holds 32 rows, not 3 heads of"),
    ("GGUF head count 0", lambda p: ["export", p.gguf_file("heads0"), "--heads", "L0.H1"], {},
     "llama.attention.head_count is 0: a head count is at least 1"),
    ("GGUF key/value head count that does not divide the heads", lambda p: ["eval", p.gguf_file("kv3"), "--task",
                                                                            p.ok_jsonl], {},
     "llama.attention.head_count_kv is 3: it does not divide llama.attention.head_count 4"),
    ("a result.json edited by hand", lambda p: ["export", p.good, "--heads", str(Path(p.edited) / "result.json")],
     {}, "was edited after find wrote it (its content no longer matches the digest find wrote)"),
    ("a result.json without its digest", lambda p: ["export", p.good, "--heads", p.undigested], {},
     "give it by hand (--heads "),
    ("a result whose task file is elsewhere", lambda p: ["export", p.good, "--heads", p.moved_run,
                                                          "--allow-unconfirmed"], {},
     "moving.jsonl is not here (a result made on another machine?): give --verify-task"),
    ("find --overwrite over a linked result.json", lambda p: ["find", p.good, "--task", p.ok_jsonl, *SMALL_FIND,
                                                              "--overwrite", "--out", p.linked_run], {},
     "result.json is a symbolic link or not a file, not one find wrote"),
    ("a head the export already lacks", lambda p: ["export", str(Path(p.root) / "export"), "--heads", "L0.H0"], {},
     "L0.H0 is gone already"),
    ("--shrink-examples 10^12", lambda p: ["find", p.good, "--task", p.ok_jsonl, *SMALL_FIND, "--shrink", "3",
                                           "--shrink-examples", "1000000000000"], {},
     "more than the limit of 10,000,000"),
]


def _stuck(signum: int, frame: object) -> None:
    raise TimeoutError("the command was still running after 120 s (blocked on a FIFO? unbounded work?)")


@pytest.mark.parametrize(("case", "args", "env", "says"), CASES, ids=[case[0] for case in CASES])
def test_a_bad_input_is_one_line_and_exit_2(p, tmp_path, monkeypatch, case, args, env, says) -> None:  # noqa: ANN001
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    arguments = args(p)
    out = tmp_path / "out"
    if arguments[0] in ("find", "export") and "--out" not in arguments:
        arguments = [*arguments, "--out", str(out)]
    previous = signal.signal(signal.SIGALRM, _stuck)  # a refusal is immediate: never wait on a blocked read
    signal.alarm(120)
    try:
        done = invoke(*arguments, catch_exceptions=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert done.exit_code == 2, done.output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("headprune: error: "), done.stderr
    assert says in lines[0] and "Traceback" not in done.output
    assert "report" not in lines[0], "the message names what is wrong itself"
    assert not out.exists(), "a refused command writes nothing"


def test_every_listed_case_is_distinct() -> None:
    """The count docs/commands.md gives is of distinct inputs."""
    assert len({case[0] for case in CASES}) == len(CASES) >= 80


def test_a_baseline_edit_is_not_reported_as_a_determinism_failure(p) -> None:  # noqa: ANN001
    done = invoke(*_journal(p, _edit_entry("discovery|", _flip)), catch_exceptions=True)
    assert done.exit_code == 2 and "determinism" not in done.output and "corrupt" in done.stderr


def test_a_journal_cut_short_by_a_kill_still_resumes(p) -> None:  # noqa: ANN001
    """The last line of a killed run may be cut short; that alone is no corruption."""
    done = invoke(*_journal(p, lambda lines: [*lines, lines[-1][:20]]), catch_exceptions=True)
    assert done.exit_code in (0, 1), done.output


def test_nan_never_reaches_a_json_output(tmp_path) -> None:
    from headprune.core.io import atomic_write_json
    from headprune.errors import InternalCheckError

    atomic_write_json(tmp_path / "ok.json", {"x": 1.5})
    for value in (float("nan"), float("inf")):
        with pytest.raises(InternalCheckError, match="NaN or infinite"):
            atomic_write_json(tmp_path / "bad.json", {"margin": [0.1, value]})
    assert not (tmp_path / "bad.json").exists()
    assert json.loads((tmp_path / "ok.json").read_text()) == {"x": 1.5}


def test_an_undefined_spearman_is_null_in_the_result(p, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Constant attribution estimates have no rank correlation: result.json says null, not NaN."""
    import headprune.search.attribution as attribution

    real = attribution.estimate_effects

    def constant(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return {head: 0.0 for head in real(*args, **kwargs)}

    monkeypatch.setattr(attribution, "estimate_effects", constant)
    done = invoke("find", p.good, "--task", p.ok_jsonl, *SMALL_FIND, "--screen", "attribution", "--candidates", "4",
                  "--out", str(tmp_path / "run"))
    assert done.exit_code in (0, 1), done.output
    text = (tmp_path / "run" / "result.json").read_text()
    assert "NaN" not in text and json.loads(text)["prescreen"]["spearman_on_candidates"] is None


def test_a_resume_names_a_model_path_once_per_spelling(p) -> None:  # noqa: ANN001
    """The same folder given another way: both spellings, each once, and what to do (not two equal reprs)."""
    done = invoke(*_resumed(p, model=p.good + "/"), catch_exceptions=True)
    assert done.exit_code == 2
    assert f"the model is given as {p.good}/ now, as {p.good} then (the same folder: give it as then)" in done.stderr


@pytest.mark.parametrize(("name", "text"), [("tokenizer.json", "{not json"), ("tokenizer_config.json", "[1, 2")])
def test_a_broken_tokenizer_is_named_as_the_tokenizer(tmp_path, tokenizer, name, text) -> None:
    """The weights loaded; what is broken is the tokenizer, and the line says so (it said "cannot load the
    weights")."""
    folder = save_folder(build_tiny("llama", tokenizer, seed=1).model, tokenizer, tmp_path / "m")
    (folder / name).write_text(text)
    done = invoke("eval", str(folder), "--task", "arithmetic", "--limit", "2", catch_exceptions=True)
    assert done.exit_code == 2 and done.stderr.startswith("headprune: error: "), done.output
    assert "cannot load the tokenizer" in done.stderr and "weights" not in done.stderr, done.stderr
