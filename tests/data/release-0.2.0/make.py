"""How this folder was made: with headprune 0.2.0's code (commit 7792adf, "0.2.0: version bumped"), checked out apart
and run as a 0.2.0 user would, from a folder holding the hand-made model and its cue task (relative paths):

    git worktree add /tmp/hp020 7792adf
    cd "$(mktemp -d)" && PYTHONPATH=/tmp/hp020:/tmp/hp020/tests python /path/to/make.py
    # keep run/result.json and pruned/ here; then: git worktree remove /tmp/hp020
"""

import subprocess
import sys
from pathlib import Path

from helpers import save_folder
from helpers.handmade import build_model, cue_task

import headprune
from headprune.tasks import write_jsonl_task

assert headprune.__version__ == "0.2.0", headprune.__file__
lm = build_model()
save_folder(lm.model, lm.tokenizer, Path("model"))
write_jsonl_task(cue_task(), Path("cue.jsonl"))
cli = [sys.executable, "-m", "headprune"]
subprocess.run([*cli, "find", "model", "--task", "cue.jsonl", "--discovery", "300", "--heldout", "300",
                "--batch-size", "64", "--out", "run"], check=True)
subprocess.run([*cli, "export", "model", "--heads", "run/result.json", "--out", "pruned"], check=True)
