"""What Python an lm-evaluation-harness task would run, found before any of it is imported.

An lm-eval task file can run Python in three ways: a ``!function module.name`` tag (``utils.py`` beside the YAML,
or any importable module), a ``class:`` entry (a Python task class; other ``!!python/...`` tags likewise), and its
Jinja templates, which lm-eval renders in an unsandboxed environment where ``{{ ... }}`` can reach Python through
attributes. headprune loads a task file of the first kinds only with ``trust_remote_code`` (the CLI's
``--trust-remote-code``: the flag that already decides whether code shipped with a checkpoint runs answers the same
question for code shipped with a task, so one switch says "I trust what I am loading"), and renders the templates
of a task it was not told to trust in Jinja's sandbox, where such a template fails instead of running.

Task files are read here with a YAML loader that records tags instead of running them, following lm-eval's own
``include:`` chains and the names it resolves (groups, tags); files that ship inside lm_eval are trusted as the
installed package is.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from headprune.core.io import user_path
from headprune.errors import TaskError

TRUST = "trust_remote_code"


class Tagged:
    """A YAML value under a tag that lm-eval would turn into Python (``!function utils.process_docs``)."""

    def __init__(self, tag: str, value: object) -> None:
        self.tag, self.value = tag, value

    def __str__(self) -> str:
        return f"{self.tag} {self.value}"


class _Recorder(yaml.SafeLoader):
    """Safe YAML that keeps any non-standard tag as a :class:`Tagged` value instead of refusing or running it."""


def _record(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Tagged:
    value = loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else "..."
    return Tagged(node.tag, value)


_Recorder.add_multi_constructor("", _record)


def read_task_file(path: Path) -> dict:
    """The YAML at ``path`` as data, its tags kept as :class:`Tagged` values (nothing imported or called).

    Raises:
        TaskError: the file cannot be read or is not a YAML mapping.
    """
    try:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=_Recorder)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise TaskError(f"cannot read lm-eval task file ({type(error).__name__}: {error})", path=str(path)) from None
    if not isinstance(config, dict):
        raise TaskError("lm-eval task file is not a YAML mapping", path=str(path))
    return config


def python_in(config: object, folder: Path, where: str = "") -> list[str]:
    """What Python ``config`` (a task file's data, or part of it) would load, one line each."""
    if isinstance(config, Tagged):
        module = str(config.value).rpartition(".")[0]
        local = folder / f"{module.replace('.', '/')}.py"
        target = f" ({local})" if module and local.is_file() else f" (module {module})" if module else ""
        return [f"{where}: {config}{target}"]
    if isinstance(config, list):
        return [line for i, item in enumerate(config) for line in python_in(item, folder, f"{where}[{i}]")]
    if not isinstance(config, dict):
        return []
    python_class = "class" in config and not isinstance(config["class"], Tagged)  # a tagged one is listed below
    found = [f"{where}class: a Python task class"] if python_class else []
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict) and kwargs.get(TRUST):
        found.append(f"{where}dataset_kwargs: {TRUST} (the dataset's own loading code)")
    if str(config.get("dataset_path", "")).endswith(".py"):
        found.append(f"{where}dataset_path: {config['dataset_path']} (a dataset loading script)")
    for key, value in config.items():
        found += python_in(value, folder, f"{where}.{key}" if where else str(key))
    return found


def _packaged(path: Path) -> bool:
    """Whether ``path`` ships inside the installed lm_eval (trusted as the package is)."""
    import lm_eval

    return Path(lm_eval.__file__).resolve().parent in path.resolve().parents


def file_python(path: Path, seen: set[Path]) -> tuple[dict, list[str]]:
    """A task file's data and the Python it and the files it includes would load (``path: line`` each)."""
    path = user_path(path).resolve()
    if path in seen or _packaged(path):
        return {}, []
    seen.add(path)
    config = read_task_file(path)
    found = [f"{path}: {line}" for line in python_in(config, path.parent)]
    includes = config.get("include") or []
    for include in includes if isinstance(includes, list) else [includes]:
        if isinstance(include, str):
            target = Path(include) if Path(include).is_absolute() else path.parent / include
            if target.is_file():
                found += file_python(target, seen)[1]
    return config, found


def _entry(entry: object) -> tuple[list[str], str | None, dict]:
    """A ``TaskManager.task_index`` entry as (the tasks a tag names, the task file, the inline config): an object
    from lm-eval 0.4.12 on (``kind``, ``tags``, ``yaml_path``, ``cfg``), a dict before (``type``, ``task``,
    ``yaml_path``, which is -1 where there is no file)."""
    if isinstance(entry, dict):
        members = entry.get("task") if entry.get("type") == "tag" else None
        path = entry.get("yaml_path")
        return (sorted(m for m in members if isinstance(m, str)) if isinstance(members, list) else [],
                path if isinstance(path, str) else None, {})
    tagged = sorted(entry.tags) if getattr(entry.kind, "name", "") == "TAG" else []
    return tagged, entry.yaml_path, entry.cfg or {}


def task_python(index: dict, names: list[str]) -> list[str]:
    """What Python loading ``names`` from lm-eval's task ``index`` (name -> entry, as ``TaskManager.task_index``
    holds it) would run: the entries' files, their includes, and the members of groups and tags, followed by name
    as lm-eval follows them."""
    found: list[str] = []
    seen_files: set[Path] = set()
    seen_names: set[str] = set()

    def visit(name: str) -> None:
        if name in seen_names or name not in index:
            return
        seen_names.add(name)
        tagged, yaml_path, inline = _entry(index[name])
        for member in tagged:  # a tag names its tasks
            visit(member)
        if yaml_path is not None:
            config, lines = file_python(Path(yaml_path), seen_files)
        else:
            config, lines = inline, python_in(inline, Path.cwd(), name)
        found.extend(lines)
        members = config.get("task") if isinstance(config, dict) and "group" in config else None
        for member in members if isinstance(members, list) else []:
            reference = member.get("task", member.get("group")) if isinstance(member, dict) else member
            if isinstance(reference, str):
                visit(reference)

    for name in names:
        visit(name)
    return found


def require_trust(names: list[str], found: list[str]) -> None:
    """Raises:
        TaskError: naming the task, the flag, and the Python it would load."""
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    raise TaskError(f"lm-eval task {', '.join(names)} runs Python from its task files ({shown}); it loads only with "
                    f"{TRUST}, for task files you trust", settings=(TRUST,))


@contextmanager
def sandboxed_templates(active: bool = True) -> Iterator[None]:
    """Render lm-eval's Jinja templates in Jinja's sandbox inside the block (lm-eval's own environment is not
    sandboxed: a template could reach Python through attributes). Ordinary templates render the same.

    Raises:
        TaskError: this lm_eval keeps its templates elsewhere, so they cannot be sandboxed.
    """
    if not active:
        yield
        return
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from lm_eval import utils

    original = getattr(utils, "env", None)
    if original is None or not hasattr(utils, "apply_template"):
        raise TaskError(f"this lm_eval renders templates in a way headprune cannot sandbox; give {TRUST} to "
                        "run the task's templates as lm_eval does", settings=(TRUST,))
    sandboxed = ImmutableSandboxedEnvironment(loader=original.loader, undefined=original.undefined,
                                              keep_trailing_newline=original.keep_trailing_newline)
    sandboxed.filters.update(original.filters)
    utils.env = sandboxed
    try:
        yield
    finally:
        utils.env = original


def sandbox_refusal(name: str, error: BaseException) -> TaskError | None:
    """The one-line refusal of a task whose template Jinja's sandbox stopped (a ``SecurityError`` anywhere in the
    chain that loading or building its prompts raised), instead of the dataset or prompt failure it surfaces as;
    None for any other error."""
    from jinja2.exceptions import SecurityError

    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, SecurityError):
            return TaskError(f"lm-eval task {name!r}: its template does what Jinja's sandbox refuses ({error}); the "
                             f"templates of task files not trusted render in the sandbox so that none reaches Python; "
                             f"give {TRUST} only for a task file you trust", settings=(TRUST,))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
