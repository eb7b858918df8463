"""What an export removes and what it is verified on: the head set (from a find result or a list) and, for a
result, the discovery and held-out sets find used and the head means it ablated with.

Everything here is checked against what find recorded (weight hash, content hashes, the means' digest), so an
export is the model find measured or nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from headprune.errors import (EditedResultError, ExportSettingsError, HeadSpecError, ResultFileError, TaskError,
                              UnconfirmedSetError)
from headprune.exporter.export_record import FindOrigin, public_name
from headprune.heads import Head, parse_heads
from headprune.loading.models import LoadedModel, builtin_hub_id
from headprune.search.find_result import FindResult
from headprune.tasks import Task, load_task, task_files

log = logging.getLogger("headprune")

HeadsLike = str | Path | Sequence[Head | str] | FindResult


def _is_folder(spec: str | Path) -> bool:
    """Whether ``spec`` names a folder (a long head list is no path: the OS refuses to look it up)."""
    try:
        return Path(spec).is_dir()
    except OSError:
        return False


def read_result(heads: HeadsLike, set_rank: int = 1) -> FindResult | None:
    """The find result ``heads`` names (an object, ``result.json`` or its folder), or None for a head list.

    Raises:
        ResultFileError: an unreadable result, or one edited since find wrote it (the message offers finalist
            ``set_rank``'s heads as it now reads them, given by hand). HeadSpecError: an empty spec.
    """
    if isinstance(heads, FindResult):
        return heads
    if isinstance(heads, str) and not heads.strip():  # Path("") is ".": the current folder's result.json
        raise HeadSpecError("no heads given: name a find result (result.json or its folder) or heads like L0.H1")
    if isinstance(heads, (str, Path)) and (str(heads).endswith(".json") or _is_folder(heads)):
        try:
            return FindResult.load(Path(heads))
        except EditedResultError as error:
            edited = error.finalists[set_rank - 1] if 1 <= set_rank <= len(error.finalists) else ()
            raise ResultFileError(
                f"{error}: its card would state find's figures for a set find may not have measured; to export a "
                f"set of your choice, give it by hand (heads {','.join(edited) or 'L0.H1,L3.H2'}), whose card "
                "claims no improvement", settings=("heads",)) from None
    return None


def resolve_heads(heads: HeadsLike, lm: LoadedModel, set_rank: int = 1
                  ) -> tuple[tuple[Head, ...], FindResult | None]:
    """The heads to remove, from a find result (finalist ``set_rank``, 1 = primary) or a head list.

    Raises:
        ResultFileError: the result was made for another model, or has no such finalist.
        HeadSpecError: malformed or out-of-range heads.
    """
    result = read_result(heads)
    if result is None:
        chosen = parse_heads(heads)  # type: ignore[arg-type]
    else:
        if result.model.weight_hash != lm.weight_hash:
            raise ResultFileError(f"the find result was made for a different model ({result.model.name}, "
                                  f"{result.model.weight_hash[:19]}...), not {lm.name}{_unpinned(result, lm)}",
                                  settings=("revision",))
        if not 1 <= set_rank <= len(result.finalists):
            raise ResultFileError(f"set_rank {set_rank}: the result has finalists 1..{len(result.finalists)}",
                                  settings=("set_rank",))
        chosen = parse_heads(result.finalists[set_rank - 1].heads)
    if not chosen:
        raise HeadSpecError("no heads to remove")
    return lm.grid.check(chosen), result


def refuse_removed_again(name: str, earlier: Sequence[Head], removed: Sequence[Head]) -> None:
    """Refuse heads that a sliced export being pruned again already lacks. Heads are named as in the original model
    (as the export's record names them); naming a removed one most likely counts the sliced model's own heads, in
    which another head now sits at that place: exported anyway, it would remove nothing new (a copy) or other heads
    than meant.

    Raises:
        HeadSpecError: naming them, and those the export lacks.
    """
    again = [str(head) for head in removed if head in set(earlier)]
    if again:
        raise HeadSpecError(f"{name} is a sliced export without {','.join(map(str, earlier))}: "
                            f"{','.join(again)} {'is' if len(again) == 1 else 'are'} gone already; heads are named as "
                            "in the original model (as its record names them): name only heads it still has")


def _unpinned(result: FindResult, lm: LoadedModel) -> str:
    """What changed, where a Hub repo's weights differ from a result that pins no commit (written before 0.3.0,
    which records the commit find read and exports that one)."""
    if result.model.revision is not None or builtin_hub_id(lm.name) != lm.name:
        return ""
    return ("; the result records no commit (headprune before 0.3.0 did not): if the repo has moved since find, give "
            "revision with the commit it read")


def refuse_unconfirmed(result: FindResult, set_rank: int) -> None:
    """An unconfirmed set (a primary set whose held-out verdict is not confirmed, or any other finalist, which
    is exploratory by construction) is exported only when asked for explicitly.

    Raises:
        UnconfirmedSetError
    """
    verdict = result.finalists[set_rank - 1].heldout
    if verdict.confirmed and result.guards_held:
        return
    if result.shrink is not None and result.shrink.rank == set_rank and result.shrunk:
        return  # find --shrink: better than the original, no worse than the primary set on fresh examples
    if verdict.confirmed:  # the task's gain held, a guard did not
        missed = [g.task for g in result.finalists[0].guards if not g.held]
        why = ("no candidate set kept the guards on discovery (this is the best trade found)"
               if result.guarding is not None and not result.guarding.kept else
               f"the guard{'s' if len(missed) > 1 else ''} {', '.join(missed)} did not hold on held-out data")
        raise UnconfirmedSetError(f"the primary set's gain is confirmed, but {why}; give allow_unconfirmed to export "
                                  "it anyway (its model card then says so)", settings=("allow_unconfirmed",))
    if set_rank == 1 and result.compression is not None:  # find --objective compress: non-inferiority
        tested = result.compression.verdict
        if tested.accepted:
            return
        raise UnconfirmedSetError(
            f"the compressed set was not shown non-inferior on held-out data ({100 * tested.level:g}% score CI lower "
            f"end {100 * tested.interval[0]:+.1f} points, margin -{100 * tested.margin:g}); give allow_unconfirmed to "
            "export it anyway (its model card then says so)", settings=("allow_unconfirmed",))
    if verdict.role == "exploratory":
        why = (f"finalist {set_rank} is exploratory (not the set find chose on discovery; Bonferroni-adjusted "
               f"p = {verdict.adjusted_p:.3g}); its figures were read after the held-out look")
    else:
        why = (f"the primary set is not confirmed on held-out data ({verdict.difference * 100:+.1f} points, "
               f"p = {verdict.p_value:.3g})")
    raise UnconfirmedSetError(f"{why}; give allow_unconfirmed to export it anyway (its model card then says it is "
                              "unconfirmed)", settings=("allow_unconfirmed",))


def find_origin(result: FindResult, set_rank: int) -> FindOrigin:
    """What the export's card says of the find result its heads came from: finalist ``set_rank``'s verdict (and a
    compression's, or a shrink's claim where that finalist is the grown set)."""
    finalist = result.finalists[set_rank - 1]
    shrink = result.shrink if result.shrink is not None and result.shrink.rank == set_rank else None
    return FindOrigin(public_name(result.task.name), set_rank, finalist.heldout,
                      result.compression.verdict if result.compression is not None and set_rank == 1 else None,
                      finalist.guards, result.guarding is None or result.guarding.kept, shrink,
                      result.verdict if shrink is not None else None, shrink is not None and result.shrunk)


@dataclass(frozen=True)
class FindSplits:
    """find's discovery and held-out sets, rebuilt; ``stood_in``: from the verification task given, which stands in
    for find's task file where that is not here (:func:`result_splits`)."""

    discovery: Task
    heldout: Task
    stood_in: bool = False


def result_splits(result: FindResult, *, given: Task | None = None, required: bool = True,
                  trust_remote_code: bool = False) -> FindSplits | None:
    """Rebuild find's discovery and held-out sets from the result (checked by content hash): from the task the
    result names, or, where its file is not here (a result made on another machine), from ``given`` when that
    task's examples are find's (the content hash find recorded); ``trust_remote_code`` lets an lm-eval task file
    run its Python. None for a task given in memory, or (``required`` False) one that is not here and that
    ``given`` does not stand in for.

    Raises:
        ResultFileError: the task changed since find ran; or (``required``) it is not here and ``given`` does not
            stand in for it.
    """
    from headprune.search.split import split_task

    if not result.task.spec:
        return None
    load = functools.partial(load_task, trust_remote_code=trust_remote_code)
    task, stood_in = _find_task(result, given, load, required)
    if task is None:
        return None
    held_spec = result.heldout_task.spec
    split = split_task(task, discovery=result.split.discovery, heldout=result.split.heldout,
                       seed=result.split.seed, heldout_task=load(held_spec) if held_spec else None)
    if split.heldout.content_hash() != result.heldout_task.hash:
        raise ResultFileError("the task files changed since find ran (held-out hash differs); give a verify_task",
                              settings=("verify_task",))
    return FindSplits(split.discovery, split.heldout, stood_in)


def _find_task(result: FindResult, given: Task | None, load: functools.partial,
               required: bool) -> tuple[Task | None, bool]:
    """find's task, and whether ``given`` stands in for it (see :func:`result_splits`)."""
    spec = result.task.spec
    try:
        return load(spec), False
    except TaskError as error:
        if task_files(spec):  # its file is here and reads otherwise now: that is what to say
            raise
        if given is not None and given.content_hash() == result.task.hash:
            return given, True
        if not required:
            return None, False
        raise ResultFileError(
            f"find's task {spec} is not here (a result made on another machine?): give verify_task, that task's "
            "file where it is now (find's held-out set is rebuilt from it and checked against find's hash) or "
            "another task to verify on", settings=("verify_task",)) from error


def find_means(lm: LoadedModel, result: FindResult, splits: FindSplits | None) -> torch.Tensor:
    """The head means find ablated with: recomputed on its discovery set (checked by content hash) the way find
    computed them, and checked against the digest find recorded; otherwise refused, never replaced by others.

    Raises:
        ResultFileError
    """
    from headprune.evaluation import Evaluator
    from headprune.surgery.ablation import means_digest

    def refuse(why: str) -> None:
        raise ResultFileError(f"mean ablation: {why}; the export would not be the model find measured")

    if splits is None:
        refuse("find's discovery set cannot be rebuilt (the result's task was given in memory, not as a spec)")
    if result.means_digest is None or result.task.discovery_hash is None:
        refuse("the result does not record the means find used (made with zero ablation or by an older headprune)")
    if splits.discovery.content_hash() != result.task.discovery_hash:
        refuse("the task changed since find ran (its discovery set hash differs)")
    means = Evaluator(lm, splits.discovery, batch_size=result.settings.batch_size).head_means()
    if means_digest(means) != result.means_digest:
        refuse(f"the head means recomputed on find's discovery set differ from those find used (digest "
               f"{result.means_digest[:19]}...); export with the dtype and device find ran with")
    return means


def check_ablation(result: FindResult | None, ablation: str, verify_task: str | Path | Task | None) -> None:
    """The ablation agrees with the result's (or, for heads given by hand, has what it needs); checked before the
    model loads.

    Raises:
        ExportSettingsError
    """
    if result is None and ablation == "mean" and verify_task is None:
        _mean_needs_task()
    if result is not None and result.settings.ablation != ablation:
        raise ExportSettingsError(f"find measured this set with {result.settings.ablation} ablation, not {ablation}; "
                                  f"export it with ablation {result.settings.ablation}", settings=("ablation",))


def _mean_needs_task() -> None:
    raise ExportSettingsError("mean ablation of heads given by hand takes its means over a task's inputs: give "
                              "verify_task", settings=("ablation", "verify_task"))


def verification_inputs(lm: LoadedModel, result: FindResult | None, verify_task: str | Path | Task | None, *,
                        limit: int, ablation: str, batch_size: int | str, trust_remote_code: bool = False
                        ) -> tuple[Task, torch.Tensor | None, bool]:
    """The task the export is verified on (at most ``limit`` examples), the head means of a mean ablation, and
    whether the task is re-measured (heads given by hand without a task: outputs on a built-in text sample).

    The task: ``verify_task``, else the held-out set the result records (also where ``verify_task`` stands in for
    find's task file, which is not here: :func:`result_splits`). The means: exactly those find used for a result
    (:func:`find_means`), the verification task's for heads given by hand.

    Raises:
        ExportSettingsError, ResultFileError, TaskError, UnsupportedModelError (the model's outputs are not finite).
    """
    from headprune.evaluation import Evaluator

    given = (load_task(verify_task, trust_remote_code=trust_remote_code) if isinstance(verify_task, (str, Path))
             else verify_task) or None
    splits = result_splits(result, given=given, required=given is None or ablation == "mean",
                           trust_remote_code=trust_remote_code) if result is not None else None
    task = splits.heldout if splits is not None and (given is None or splits.stood_in) else given
    remeasured = task is not None
    if task is None:
        if ablation == "mean":
            _mean_needs_task()
        from headprune.exporter.sample import sample_task

        task = sample_task(lm)
    task = task.first(limit)
    evaluator = Evaluator(lm, task, batch_size=batch_size)
    evaluator.check_finite()  # a broken model is refused, not exported
    if not remeasured:
        log.info("export: no task given: outputs are verified on a built-in text sample (%d texts); no task is "
                 "re-measured", len(task))
    means = None
    if ablation == "mean":  # a find result: exactly the means find used; heads given by hand: the verify task's
        means = find_means(lm, result, splits) if result is not None else evaluator.head_means()
    return task, means, remeasured


def pinned_revision(model: object, result: FindResult | None, revision: str | None) -> str | None:
    """The revision export reads of a Hub id: what was asked (``revision``), else the commit find read, checked
    against what the Hub id reads now: a branch that has moved since find is refused rather than exported under a
    result measured on another commit.

    Raises:
        ExportSettingsError: the Hub id's default revision now reads another commit than find did.
        ModelNotFoundError: the Hub has no such revision.
    """
    from headprune.errors import ExportSettingsError
    from headprune.loading.model_download import current_commit
    from headprune.loading.models import builtin_hub_id

    found = result.model.revision if result is not None else None
    if revision is not None or found is None or not isinstance(model, str) or builtin_hub_id(model) != model:
        return revision  # asked for (checked against find's weights once loaded), or nothing pinned
    now = current_commit(model)
    if now is not None and now != found:
        raise ExportSettingsError(
            f"{model}: main now reads commit {now[:12]}, not the commit {found[:12]} find read; give --revision "
            f"{found} to export the model find measured (or --revision main: its weights are checked against find's)",
            settings=("revision",))
    return found
