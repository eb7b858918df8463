"""lm-eval task code runs only with consent: a task file that names Python (``!function``, ``class:``, in itself or
a file it includes or a task it names) is refused, exit 2 naming --trust-remote-code and the Python, before any of
that Python is imported; with the flag it loads. Templates of tasks not trusted render in Jinja's sandbox.

Every Python file here writes a marker file when imported: the marker's absence is the proof that nothing ran.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.cli import invoke
from headprune.errors import TaskError
from headprune.tasks import load_task

pytest.importorskip("lm_eval", reason="lm-eval tasks need the lm-eval extra")

ROWS = Path(__file__).resolve().parent / "data" / "lm_eval" / "choice.jsonl"


def _task(folder: Path, name: str, extra: str = "", file: str | None = None) -> Path:
    """A multiple-choice YAML task over the shipped rows, with ``extra`` YAML lines."""
    path = folder / (file or f"{name}.yaml")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {ROWS}\n"
                    f"  cache_dir: {folder / 'datasets'}\ntest_split: test\noutput_type: multiple_choice\n"
                    'doc_to_text: "{{question}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: "{{answer}}"\n'
                    f"metric_list:\n  - metric: acc\n{extra}")
    return path


def _utils(folder: Path, marker: Path) -> None:
    """utils.py that writes ``marker`` as soon as it is imported; its process_docs keeps the documents."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "utils.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n\n"
                                     "def process_docs(dataset):\n    return dataset\n")


def test_a_function_tag_needs_consent_and_loads_with_it(tiny_folder, tmp_path) -> None:  # noqa: ANN001
    marker = tmp_path / "marker"
    folder = tmp_path / "tasks"
    path = _task(folder, "hp_py", "process_docs: !function utils.process_docs\n")
    _utils(folder, marker)
    spec = f"lm-eval:{path}"
    for command in (["eval", str(tiny_folder), "--task", spec],
                    ["find", str(tiny_folder), "--task", spec, "--out", str(tmp_path / "run")]):
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert "--trust-remote-code" in result.output and str(folder / "utils.py") in result.output
        assert "process_docs: !function utils.process_docs" in result.output and "Traceback" not in result.output
        assert not marker.exists()
    assert not (tmp_path / "run").exists()
    out = tmp_path / "results.jsonl"
    result = invoke("eval", str(tiny_folder), "--task", spec, "--trust-remote-code", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert marker.read_text() == "imported"
    assert len(out.read_text().splitlines()) == len(ROWS.read_text().splitlines())


def test_classes_includes_groups_and_shadowed_names_are_followed(tmp_path) -> None:  # noqa: ANN001
    """The Python is found wherever lm-eval would load it from: a ``class:`` entry, a file the task includes, a
    task a group names, and the file lm-eval picks for a name that two files share."""
    marker = tmp_path / "marker"
    cases = tmp_path / "class"
    _utils(cases, marker)
    cases_task = _task(cases, "hp_class", "class: !function utils.process_docs\n")
    included = tmp_path / "include"
    _task(included, "hp_base", "process_docs: !function utils.process_docs\n", file="base/base.yaml")
    _utils(included / "base", marker)
    including = included / "top.yaml"
    including.write_text("include: base/base.yaml\ntask: hp_top\n")
    grouped = tmp_path / "group"
    _task(grouped, "hp_member", "process_docs: !function utils.process_docs\n", file="members/member.yaml")
    _utils(grouped / "members", marker)
    (grouped / "group.yaml").write_text("group: hp_group\ntask:\n  - hp_member\n")
    group = f"{_task(grouped, 'hp_plain')},hp_group"  # a plain task file, and the group by name
    shadowed = tmp_path / "shadow"
    given = _task(shadowed, "hp_same")  # no Python here, but lm-eval loads the other file for this name
    _task(shadowed, "hp_same", "process_docs: !function utils.process_docs\n", file="A/same.yaml")
    _utils(shadowed / "A", marker)
    for path, named in ((cases_task, "class"), (including, "process_docs"), (group, "process_docs")):
        with pytest.raises(TaskError, match="trust_remote_code") as caught:
            load_task(f"lm-eval:{path}")
        assert named in str(caught.value), str(caught.value)
    # The shadowed name: lm-eval 0.4.13 loads the other file (its Python must be refused), 0.4.10 the one given
    # (nothing to refuse). Either way no Python runs without consent: the marker tells.
    try:
        load_task(f"lm-eval:{given}")
    except TaskError as error:
        assert "trust_remote_code" in str(error) and "process_docs" in str(error), str(error)
    assert not marker.exists()


def test_templates_of_untrusted_tasks_render_in_a_sandbox(tmp_path) -> None:  # noqa: ANN001
    """No tag at all, but a template that reaches Python through attributes: refused untrusted (the sandbox
    stops it), run with consent (lm-eval's own environment)."""
    marker = tmp_path / "marker"
    folder = tmp_path / "tasks"
    template = (f"{{{{ cycler.__init__.__globals__.os.open({str(marker)!r}, 65) }}}}{{{{question}}}}")
    path = _task(folder, "hp_jinja")
    path.write_text(path.read_text().replace('doc_to_text: "{{question}}"', f'doc_to_text: "{template}"'))
    done = invoke("eval", str(tmp_path / "no-model"), "--task", f"lm-eval:{path}", catch_exceptions=True)
    assert done.exit_code == 2 and done.stderr.count("\n") == 1, done.stderr  # no dataset progress bars before it
    assert "Jinja's sandbox refuses" in done.stderr and "--trust-remote-code only for a task file you trust" in \
        done.stderr and "dataset could not be loaded" not in done.stderr
    with pytest.raises(TaskError, match="its template does what Jinja's sandbox refuses .access to attribute"):
        load_task(f"lm-eval:{path}")
    assert not marker.exists()
    load_task(f"lm-eval:{path}", trust_remote_code=True)
    assert marker.exists()


def test_a_task_without_python_needs_no_flag(tmp_path) -> None:  # noqa: ANN001
    path = _task(tmp_path, "hp_plain")
    (tmp_path / "unused.py").write_text(f"open({str(tmp_path / 'marker')!r}, 'w')\n")  # beside it, never named
    task = load_task(f"lm-eval:{path}")
    assert task.kind == "choice" and len(task) == len(ROWS.read_text().splitlines())
    assert [e.answer for e in task.examples] == [json.loads(line)["answer"] for line in ROWS.read_text().splitlines()]
    assert not (tmp_path / "marker").exists()
