"""Tasks from lm-evaluation-harness: ``lm-eval:NAME[,NAME...]`` or ``lm-eval:path/to/task.yaml``.

The prompts are lm-evaluation-harness's own: its task objects build their requests (``doc_to_text``,
``doc_to_choice``, ``doc_to_target``, few-shot examples, ``target_delimiter``) and headprune turns each
document's requests into one example, so that the intact model's accuracy equals ``lm_eval``'s on the same
documents:

    multiple_choice  -> ``choice``: the prompt is the request's context plus the target delimiter; trailing
                        whitespace moves to the continuation as lm-eval's tokenisation does. ``acc`` sums the
                        log-likelihood, ``acc_norm`` divides it by the choice's length in characters and
                        ``acc_bytes`` in UTF-8 bytes, as lm-eval does.
    generate_until   -> ``generate``: greedy decoding up to the first ``until`` string (``max_gen_toks``
                        tokens at most), scored by lm-eval itself at run time: the task's ``filter_list``
                        entry built by lm-eval's filter registry (``build_filter_ensemble``, as its ``Task``
                        builds it) reads the answer, and the task's ``process_results`` on the document
                        scores it (``exact_match`` with the task's options): :class:`LmEvalJudge`.

Only lm-eval's public API is used (``TaskManager``, the ``Task`` methods, ``lm_eval.filters``, ``Instance``).

Options after a second colon: ``metric=acc|acc_norm|acc_bytes`` (default: ``acc_norm`` when the task lists
it, else ``acc``), ``num_fewshot=N``, ``split=NAME`` (default: the task's test split, else validation),
``filter=NAME`` (generate_until: which of the task's ``filter_list`` entries gives the answer; default the
first listed, e.g. gsm8k's ``strict-match``; lm-eval reports one exact_match per filter).
Needs the optional extra ``headprune[lm-eval]``. A task file that runs Python (``!function``, ``class:``) loads only
with ``trust_remote_code``, and templates of tasks not trusted render in Jinja's sandbox
(``headprune.tasks.harness_python``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from headprune.core.io import user_path
from headprune.errors import MissingExtraError, TaskError
from headprune.tasks.answers import AnswerRule
from headprune.tasks.base import Example, Task, parse_options
from headprune.tasks.harness_python import (read_task_file, require_trust, sandbox_refusal, sandboxed_templates,
                                            task_python)

PREFIX = "lm-eval:"
_METRICS = ("acc", "acc_norm", "acc_bytes")
_DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HFLM default
FEWSHOT_SEED = 1234  # lm_eval's default --seed for few-shot sampling


def load_harness_task(spec: str, *, trust_remote_code: bool = False) -> Task:
    """Build a task from lm-evaluation-harness task names or a YAML task file.

    Args:
        trust_remote_code: run the Python a task file names (``!function``, ``class:``) and its templates
            unsandboxed; without it such a task is refused before any of its Python is imported.

    Raises:
        TaskError: lm-eval not installed, unknown task, a task file that runs Python without trust_remote_code,
            a dataset that cannot be loaded, an output type or setting headprune cannot reproduce, or tasks of
            different kinds.
    """
    body = spec[len(PREFIX):]
    names_text, _, option_text = body.partition(":")
    if Path(body).suffix in (".yaml", ".yml") and Path(body).exists():  # a path with ':' in it
        names_text, option_text = body, ""
    options = parse_options(option_text)
    metric = options.pop("metric", None)
    if metric is not None and metric not in _METRICS:
        raise TaskError(f"metric must be one of {', '.join(_METRICS)}, not {metric!r}")
    split = options.pop("split", None)
    answer_filter = options.pop("filter", None)
    try:
        num_fewshot = int(options["num_fewshot"]) if "num_fewshot" in options else None
    except ValueError:
        raise TaskError("option num_fewshot must be an integer") from None
    options.pop("num_fewshot", None)
    if options:
        raise TaskError(f"lm-eval tasks take only metric, num_fewshot, split and filter, not {sorted(options)[0]!r}")
    names = [n.strip() for n in names_text.split(",") if n.strip()]
    if not names:
        raise TaskError("lm-eval: name at least one task, e.g. lm-eval:hellaswag or lm-eval:path/to/task.yaml")
    try:
        import lm_eval.tasks  # noqa: F401 - before anything else of it is touched
    except ImportError:
        raise MissingExtraError("lm-eval tasks need lm_eval, not installed: pip install 'headprune[lm-eval]'") from None
    with sandboxed_templates(not trust_remote_code):
        harness_tasks = _harness_tasks(names, trust_remote_code=trust_remote_code)
        built = [_convert(name, task, metric=metric, split=split, num_fewshot=num_fewshot,
                          answer_filter=answer_filter) for name, task in harness_tasks]
    kinds = {task.kind for task in built}
    if len(kinds) > 1:
        raise TaskError(f"lm-eval tasks {', '.join(names)} mix kinds ({', '.join(sorted(kinds))}); give them apart")
    settings = [(t.length_normalize, t.length_unit, t.until, t.max_new_tokens, t.answer) for t in built]
    if len(set(settings)) > 1:
        raise TaskError(f"lm-eval tasks {', '.join(names)} are scored differently (metric, until, length or "
                        "answer filter); give them apart")
    first = built[0]
    examples = tuple(example for task in built for example in task.examples)
    return Task(spec, first.kind, examples, length_normalize=first.length_normalize,
                max_new_tokens=first.max_new_tokens, length_unit=first.length_unit,
                strip_context=first.strip_context, until=first.until, strip_answers=first.strip_answers,
                answer=first.answer,
                description="; ".join(task.description for task in built),
                settings={"lm_eval": {t.name: t.settings for t in built}})


def _harness_tasks(names: list[str], *, trust_remote_code: bool) -> list[tuple[str, object]]:
    """``(name, lm-eval task object)`` per name; YAML paths are read from their own folder. Without
    ``trust_remote_code``, what they would load is checked first (lm-eval's index reads files without running
    them; loading a task imports its Python)."""
    try:
        from lm_eval.tasks import TaskManager, get_task_dict
    except ImportError:
        raise MissingExtraError("lm-eval tasks need lm_eval, not installed: pip install 'headprune[lm-eval]'") from None
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its per-task notices are not headprune's output
    import datasets

    datasets.disable_progress_bars()  # "Generating test split" bars: headprune's refusals and progress are its own
    paths = [user_path(n) for n in names if n.endswith((".yaml", ".yml"))]
    for path in paths:
        if not path.is_file():
            raise TaskError(f"no lm-eval task file {str(path)!r}")
    include = sorted({str(path.resolve().parent) for path in paths})
    manager = TaskManager(include_path=include or None, include_defaults=len(paths) < len(names))
    keys = [_yaml_task_name(Path(name)) if name.endswith((".yaml", ".yml")) else name for name in names]
    if not trust_remote_code:
        found = task_python(getattr(manager, "task_index", None) or {}, keys)
        if found or not hasattr(manager, "task_index"):
            require_trust(keys, found or ["this lm_eval does not show what its tasks load"])
    result = []
    for key in keys:
        try:
            # TaskManager.load (0.4.12 on; get_task_dict is deprecated there), get_task_dict before it.
            loaded = (manager.load([key])["tasks"] if hasattr(manager, "load")
                      else dict(_leaves(get_task_dict([key], manager))))
        except TaskError:
            raise
        except Exception as error:  # noqa: BLE001 -- lm-eval and datasets raise many kinds; name the cause
            raise _load_error(key, error) from error
        if not loaded:
            raise TaskError(f"lm-eval has no task {key!r}")
        result.extend(loaded.items())
    return result


def _leaves(tree: dict) -> list[tuple[str, object]]:
    """The tasks of ``get_task_dict``'s answer, groups opened (a group maps to a dict of its tasks)."""
    out: list[tuple[str, object]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out += _leaves(value)
        elif value is not None:
            out.append((str(key), value))
    return out


def _yaml_task_name(path: Path) -> str:
    """The ``task:`` name in a YAML task file (read with every ``!tag``, such as ``!function``, left unresolved)."""
    name = read_task_file(path).get("task")
    if not isinstance(name, str):
        raise TaskError("lm-eval task file has no 'task:' name", path=str(path))
    return name


def _load_error(name: str, error: Exception) -> TaskError:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    refusal = sandbox_refusal(name, error)  # a template the sandbox stopped, met while loading the dataset
    if refusal is not None:
        return refusal
    if "not found" in text.lower() and "task" in text.lower() or isinstance(error, KeyError):
        return TaskError(f"lm-eval has no task {name!r} ({text})")
    return TaskError(
        f"lm-eval task {name!r}: its dataset could not be loaded ({type(error).__name__}: {text}); offline, "
        "point the task at local files: a YAML task with dataset_path: json and dataset_kwargs: "
        "{data_files: {test: /path/to/rows.jsonl}}, used as --task lm-eval:path/to/task.yaml")


def _convert(name: str, task: object, *, metric: str | None, split: str | None, num_fewshot: int | None,
             answer_filter: str | None = None) -> Task:
    config = task.config  # type: ignore[attr-defined]
    output_type = task.OUTPUT_TYPE  # type: ignore[attr-defined]
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=num_fewshot)  # type: ignore[attr-defined]
    if split is not None:
        _use_split(task, name, split)
    # lm_eval seeds each task's few-shot sampler with this before building requests; without it the shots
    # (and so the prompts) would differ from lm_eval's run.
    task.set_fewshot_seed(seed=FEWSHOT_SEED)  # type: ignore[attr-defined]
    try:
        task.build_all_requests()  # type: ignore[attr-defined]
    except Exception as error:  # noqa: BLE001 -- templates and few-shot samplers raise anything
        raise sandbox_refusal(name, error) or TaskError(
            f"lm-eval task {name!r}: building its prompts failed ({type(error).__name__}: {error})") from error
    by_doc: dict[int, list] = {}
    for instance in task.instances:  # type: ignore[attr-defined]
        by_doc.setdefault(instance.doc_id, []).append(instance)
    settings = {"output_type": output_type, "num_fewshot": config.num_fewshot, "documents": len(by_doc)}
    if output_type == "multiple_choice":
        listed = list(task.aggregation())  # type: ignore[attr-defined]  # the metrics the task reports
        chosen = metric or ("acc_norm" if "acc_norm" in listed else "acc")
        delimiter = config.target_delimiter
        if delimiter.strip():
            raise TaskError(f"lm-eval task {name!r}: target_delimiter {delimiter!r} is not whitespace; "
                            "headprune cannot tokenise it as lm-eval does")
        examples = tuple(_choice_example(name, task, doc_id, instances, delimiter)
                         for doc_id, instances in sorted(by_doc.items()))
        return Task(name, "choice", examples, length_normalize=chosen != "acc",
                    length_unit="bytes" if chosen == "acc_bytes" else "chars", strip_context="whitespace",
                    description=f"lm-eval {name}: {len(examples)} documents, {chosen}",
                    settings={**settings, "metric": chosen})
    if output_type == "generate_until":
        if metric is not None:
            raise TaskError(f"lm-eval task {name!r} is generate_until: its metric is exact_match, not {metric}")
        rule = _answer_rule(name, task, answer_filter, {f"{name}/{doc_id}": instances[0].doc
                                                        for doc_id, instances in by_doc.items()})
        kwargs = dict(by_doc[min(by_doc)][0].arguments[1])
        until = kwargs.get("until") or []
        until = (until,) if isinstance(until, str) else tuple(until)
        max_tokens = int(kwargs.get("max_gen_toks", _DEFAULT_MAX_GEN_TOKS))
        examples = tuple(_generate_example(name, task, doc_id, instances)
                         for doc_id, instances in sorted(by_doc.items()))
        return Task(name, "generate", examples, max_new_tokens=max_tokens, until=until, strip_answers=False,
                    answer=rule, description=f"lm-eval {name}: {len(examples)} documents, exact_match "
                    f"({rule.name[len('lm-eval:'):]} filter)",
                    settings={**settings, "metric": "exact_match", "until": list(until), "filter": rule.name})
    raise TaskError(f"lm-eval task {name!r} is {output_type}; headprune reads multiple_choice and "
                    "generate_until tasks")


def _use_split(task: object, name: str, split: str) -> None:
    dataset = getattr(task, "dataset", None)
    if dataset is None or split not in dataset:
        raise TaskError(f"lm-eval task {name!r} has no split {split!r}")
    task.set_config(key="test_split", value=split)  # type: ignore[attr-defined]


def _choice_example(name: str, task: object, doc_id: int, instances: list, delimiter: str) -> Example:
    doc = instances[0].doc
    choices = task.doc_to_choice(doc)  # type: ignore[attr-defined]
    context = instances[0].arguments[0]
    for instance, choice in zip(instances, choices):
        if instance.arguments != (context, f"{delimiter}{choice}"):
            raise TaskError(f"lm-eval task {name!r}: document {doc_id}'s requests are not one context with "
                            "a continuation per choice; headprune cannot score it as lm-eval does")
    gold = task.doc_to_target(doc)  # type: ignore[attr-defined]
    if isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else -1
    if isinstance(gold, list) or not isinstance(gold, int) or not 0 <= gold < len(choices):
        raise TaskError(f"lm-eval task {name!r}: document {doc_id}'s target {gold!r} is not one index into "
                        "its choices")
    return Example(f"{name}/{doc_id}", prompt=context + delimiter, choices=tuple(choices), answer=gold)


def _generate_example(name: str, task: object, doc_id: int, instances: list) -> Example:
    doc = instances[0].doc
    target = task.doc_to_target(doc)  # type: ignore[attr-defined]
    if isinstance(target, int) and task.config.doc_to_choice is not None:  # type: ignore[attr-defined]
        target = task.doc_to_choice(doc)[target]  # type: ignore[attr-defined]
    if isinstance(target, list):
        raise TaskError(f"lm-eval task {name!r}: document {doc_id} has several targets; headprune needs one")
    return Example(f"{name}/{doc_id}", prompt=instances[0].arguments[0], target=str(target))


def _answer_rule(name: str, task: object, chosen: str | None, docs: dict[str, dict]) -> AnswerRule:
    """The task's answer filter (``filter_list``; ``chosen`` names one, default the first listed, none: lm-eval's
    plain ``take_first``), scored by lm-eval on each example's document (``docs``, by example id).

    Raises:
        TaskError: a metric other than exact_match, an unknown filter name, or a filter lm-eval cannot build.
    """
    config = task.config  # type: ignore[attr-defined]
    kwargs: dict = {}
    for entry in config.metric_list or []:
        if entry.get("metric") != "exact_match":
            raise TaskError(f"lm-eval task {name!r} scores with {entry.get('metric')}; headprune reads "
                            "exact_match only")
        kwargs.update({k: v for k, v in entry.items() if k not in ("metric", "aggregation", "higher_is_better")})
    filters = [entry for entry in config.filter_list or [] if isinstance(entry, dict)]
    names = [str(entry.get("name")) for entry in filters]
    if chosen is not None and chosen not in names:
        raise TaskError(f"lm-eval task {name!r} has no filter {chosen!r}"
                        + (f"; its filters: {', '.join(names)}" if names else "; it lists no filters"))
    entry = next((e for e in filters if chosen is None or str(e.get("name")) == chosen),
                 {"name": "none", "filter": [{"function": "take_first"}]})
    try:
        return harness_rule(str(entry.get("name")), list(entry.get("filter") or []), kwargs, task=task, docs=docs)
    except TaskError as error:
        raise TaskError(f"lm-eval task {name!r}: {error}") from None


class LmEvalJudge:
    """lm-eval's own scoring of a generate_until response: the filter pipeline built by its registry
    (``lm_eval.filters.build_filter_ensemble``, as ``Task`` builds ``filter_list``) and applied to an ``Instance``
    as lm-eval applies it, then ``task.process_results(doc, [answer])``; without a task (a pipeline on its own),
    the registry's ``exact_match`` with the options."""

    def __init__(self, name: str, components: list, options: dict, task: object = None,
                 docs: dict[str, dict] | None = None) -> None:
        from lm_eval.filters import build_filter_ensemble

        self.ensemble = build_filter_ensemble(name, components)
        self.options, self.task, self.docs = options, task, docs or {}

    def extract(self, response: str, key: str | None = None) -> object:
        from lm_eval.api.instance import Instance

        instance = Instance(request_type="generate_until", doc=self.docs.get(key or "", {}), arguments=("", {}),
                            idx=0)
        instance.resps = [response]
        self.ensemble.apply([instance])
        return instance.filtered_resps[self.ensemble.name]

    def correct(self, response: str, target: str, key: str | None = None) -> bool:
        answer = self.extract(response, key)
        if self.task is not None and key in self.docs:
            return bool(self.task.process_results(self.docs[key], [answer])["exact_match"])  # type: ignore
        from lm_eval.api.registry import get_metric

        return bool(get_metric("exact_match")(references=[target], predictions=[answer], **self.options)
                    ["exact_match"])


def harness_rule(name: str, components: list, metric_kwargs: dict, *, task: object = None,
                 docs: dict[str, dict] | None = None) -> AnswerRule:
    """An lm-eval filter pipeline (``[{"function": ..., **kwargs}, ...]``) and exact_match options as a rule that
    lm-eval scores (:class:`LmEvalJudge`); tried on an empty response now, so that a filter or option lm-eval
    does not know fails at load, not at the first response.

    Raises:
        TaskError: a filter or option lm-eval cannot use (its reason).
    """
    pairs = []
    for component in components:
        if not isinstance(component, dict) or "function" not in component:
            raise TaskError(f"filter {name!r}: each step needs a 'function', not {component!r}")
        pairs.append([component["function"], {k: v for k, v in component.items() if k != "function"}])
    try:
        judge = LmEvalJudge(name, pairs, metric_kwargs, task, docs)
        key = next(iter(judge.docs), None)
        judge.correct("", "", key)
    except Exception as error:  # noqa: BLE001 - lm-eval raises what its registry and filters raise
        raise TaskError(f"filter {name!r} with exact_match options {sorted(metric_kwargs)}: lm-eval cannot use it "
                        f"({type(error).__name__}: {error})") from None
    steps = tuple((function, json.dumps(kwargs, sort_keys=True)) for function, kwargs in pairs
                  if function not in ("take_first", "majority_vote"))  # as data: the task's hash and reports
    known = [k for k in ("regexes_to_ignore", "ignore_case", "ignore_punctuation", "ignore_numbers") if k in metric_kwargs]
    match = tuple((key, json.dumps(metric_kwargs[key])) for key in known + sorted(set(metric_kwargs) - set(known)))
    return AnswerRule(f"lm-eval:{name}", steps, match, judge)
