"""A symbolic link planted at one of a find run's files (``result.json`` leading elsewhere) before ``find --overwrite``
or while it runs: either nothing moves and the one line says so, or the line names exactly what moved. Before, the
run moved ``report.md`` and ``screen.png`` in, stopped at the link, and said that nothing there was replaced."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from headprune.tasks import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import assert_refused, invoke

FIND = ["--discovery", "24", "--heldout", "16", "--nominees", "2", "--max-heads", "2", "--finalists", "1",
        "--batch-size", "8"]
ELSEWHERE = '{"not": "a find result"}\n'


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A model folder, a task file, and a finished find run to start afresh over."""
    folder = tmp_path_factory.mktemp("links")
    save_folder(build_tiny("llama", tokenizer, seed=4).model, tokenizer, folder / "model")
    write_jsonl_task(random_choice_task(40, seed=1), folder / "t.jsonl")
    done = invoke("find", str(folder / "model"), "--task", str(folder / "t.jsonl"), *FIND, "--out", str(folder / "run"))
    assert done.exit_code in (0, 1), done.output
    return folder


def _run_with_link(inputs: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A copy of the run whose result.json is a link to a file elsewhere; the other files' bytes."""
    run = tmp_path / "run"
    shutil.copytree(inputs / "run", run, ignore=shutil.ignore_patterns(".*"))
    target = tmp_path / "elsewhere.json"
    target.write_text(ELSEWHERE)
    (run / "result.json").unlink()
    (run / "result.json").symlink_to(target)
    return run, target, {name: (run / name).read_bytes() for name in ("report.md", "screen.png")}


def _find(inputs: Path, run: Path):  # noqa: ANN202
    return invoke("find", str(inputs / "model"), "--task", str(inputs / "t.jsonl"), *FIND, "--out", str(run),
                  "--overwrite", catch_exceptions=True)


def _untouched(run: Path, target: Path, before: dict[str, bytes]) -> None:
    assert {name: (run / name).read_bytes() for name in before} == before
    assert (run / "result.json").is_symlink() and target.read_text() == ELSEWHERE


def test_a_link_planted_before_the_run_is_refused_before_it_starts(inputs, tmp_path) -> None:
    run, target, before = _run_with_link(inputs, tmp_path)
    done = _find(inputs, run)
    assert_refused(done, "result.json is a symbolic link or not a file, not one find wrote; move it away")
    assert "conditions" not in done.output  # nothing was computed
    _untouched(run, target, before)


def test_a_link_planted_during_the_run_moves_nothing_and_says_so(inputs, tmp_path, monkeypatch) -> None:
    import headprune.report.markdown as markdown

    run = tmp_path / "run"
    shutil.copytree(inputs / "run", run, ignore=shutil.ignore_patterns(".*"))
    target = tmp_path / "elsewhere.json"
    target.write_text(ELSEWHERE)
    before = {name: (run / name).read_bytes() for name in ("report.md", "screen.png")}
    real = markdown.render_markdown

    def plant_then_render(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - another process, while find writes
        (run / "result.json").unlink()
        (run / "result.json").symlink_to(target)
        return real(*args, **kwargs)

    monkeypatch.setattr(markdown, "render_markdown", plant_then_render)
    done = _find(inputs, run)
    assert done.exit_code == 2 and done.stderr.splitlines()[-1].startswith("headprune: error: "), done.output
    line = done.stderr.splitlines()[-1]
    assert "result.json is a symbolic link or not a file" in line
    assert "nothing there was replaced or removed, and it is kept in " in line
    _untouched(run, target, before)
    kept = Path(line.rsplit("it is kept in ", 1)[1])
    assert {"result.json", "report.md", "screen.png"} <= {p.name for p in kept.iterdir()}


def test_a_link_that_appears_between_two_moves_is_named_with_what_moved(inputs, tmp_path, monkeypatch) -> None:
    """The last moment: the folder was checked and every destination looked at, and then, after report.md and
    screen.png moved in, result.json became a link: the line names the two that are the new run's."""
    import headprune.core.paths as paths

    run = tmp_path / "run"
    shutil.copytree(inputs / "run", run, ignore=shutil.ignore_patterns(".*"))
    target = tmp_path / "elsewhere.json"
    target.write_text(ELSEWHERE)
    real = paths.os.replace

    def replace_then_plant(source, destination) -> None:  # noqa: ANN001
        real(source, destination)
        if Path(destination).name == "screen.png":
            (run / "result.json").unlink()
            (run / "result.json").symlink_to(target)

    monkeypatch.setattr(paths.os, "replace", replace_then_plant)
    done = _find(inputs, run)
    line = done.stderr.splitlines()[-1]
    assert done.exit_code == 2 and line.startswith("headprune: error: "), done.output
    assert "report.md, screen.png there are the new output's; the rest is kept in " in line
    assert "nothing there was replaced" not in line and target.read_text() == ELSEWHERE
    kept = Path(line.rsplit("is kept in ", 1)[1])
    assert [p.name for p in kept.iterdir()] == ["result.json"]
