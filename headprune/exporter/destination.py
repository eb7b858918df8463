"""Where an export may be written, decided before anything is: the rules that keep it from replacing what is not
headprune's own.

An export replaces its folder as a whole (once the new one is verified), so ``out`` must be a folder nothing of
value can be lost from: one that does not exist yet, an empty one (used as it is: the files are moved into it, and
the folder itself, perhaps a mount point or one with its own permissions, stays), or a previous headprune export
(recognised by its record, holding nothing the record does not list) with ``overwrite``. Refused: anything the
export reads (the source model, the find run it exports and that run's task files, the verification task) and any
folder inside one or holding one, a folder holding a find run, a filesystem root or the home folder, a symbolic
link, a name too long to write beside, and a folder of other files. The same rule is checked again right before the
verified export is moved into place (``atomic_folder``'s check): a folder that changed meanwhile is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from headprune.core.io import refuse_unsafe_output, user_path
from headprune.core.paths import check_output_name, refuse_overlap
from headprune.errors import ExportSettingsError, ResultFileError
from headprune.exporter.export_record import RECORD_NAME, read_record
from headprune.search.find_result import RESULT_NAME
from headprune.search.journal import JOURNAL_NAME


def local_sources(model: object) -> list[Path]:
    """The files and folders on this machine that ``model`` (a spec, or a loaded model) is read from: a loaded
    model's folder, a path, or a Hub id's folder in the Hugging Face cache (its snapshots and blobs; perhaps not
    there yet: a load may download into it)."""
    from headprune.loading.model_download import cache_folder
    from headprune.loading.models import builtin_hub_id

    folder = getattr(model, "folder", None)
    if isinstance(folder, Path):  # a loaded model: its folder (a model built in memory has none)
        return [folder] if (folder / "config.json").is_file() else []
    try:
        path = user_path(str(model))
        if path.exists():
            return [path]
    except (OSError, ValueError):
        return []
    is_hub_id = builtin_hub_id(str(model)) == str(model)  # OWNER/NAME and no such path (a built-in's is its GGUF)
    return [cache_folder(str(model))] if is_hub_id else []


def export_inputs(model: object, heads: object = None, verify_task: object = None,
                  result: object = None) -> list[tuple[str, Path]]:
    """What an export reads on this machine, as ``(what, path)``: the source model (a spec or a loaded model), a
    result given as a path and the find run it belongs to (its folder, or the folder of a ``result.json`` or of a
    result beside a journal), the task files of that result, and the verification task."""
    from headprune.tasks import task_files

    inputs = [("the source model", path) for path in local_sources(model)]
    try:
        path = user_path(str(heads)) if isinstance(heads, (str, Path)) and str(heads).strip() else None
        if path is not None and path.is_file():
            inputs.append(("the find result it exports", path))
            path = path.parent if path.name == RESULT_NAME or (path.parent / JOURNAL_NAME).exists() else None
        if path is not None and path.is_dir():
            inputs.append(("the find run it exports", path))
    except OSError:  # a name too long: nothing is read from it
        pass
    for task in (getattr(result, "task", None), getattr(result, "heldout_task", None)):
        inputs += [("a task of the find run it exports", path) for path in task_files(getattr(task, "spec", None))]
    if isinstance(verify_task, (str, Path)):
        inputs += [("the verification task", path) for path in task_files(verify_task)]
    return inputs


def check_destination(out: Path, *, sources: Iterable[tuple[str, Path]] = (), overwrite: bool = False) -> None:
    """Refuse an ``out`` folder an export must not write (see the module's rules).

    Args:
        sources: what the export reads, ``(what, path)`` (:func:`export_inputs`).

    Raises:
        ResultFileError: a folder that is not headprune's to replace. ExportSettingsError: a previous export,
        without ``overwrite``.
    """
    out = Path(out)
    refuse_unsafe_output(out)
    check_output_name(out)
    if out.is_symlink():  # replacing it would replace the link, and leave what it points to
        raise ResultFileError(f"{out} is a symbolic link; give the folder it points to", settings=("out",))
    refuse_overlap(out, sources, advice="export into a folder of its own")
    if out.exists():
        check_contents(out, overwrite=overwrite)


def check_contents(folder: Path, *, overwrite: bool, shown_as: Path | None = None) -> None:
    """Refuse an existing ``folder`` an export must not replace: not a folder, a find run, a folder of other files,
    or a previous export without ``overwrite`` (an empty folder passes).

    Args:
        shown_as: the name the messages give the folder (the destination, for a folder taken out of its place).

    Raises:
        ResultFileError, ExportSettingsError: as :func:`check_destination`.
    """
    out = shown_as or folder
    if not folder.is_dir():
        raise ResultFileError(f"{out} exists and is not a folder", settings=("out",))
    run = [name for name in (JOURNAL_NAME, RESULT_NAME) if (folder / name).exists()]
    if run:
        raise ResultFileError(f"{out} holds a find run ({', '.join(run)}); export into a folder of its own",
                              settings=("out",))
    if not any(folder.iterdir()):
        return  # empty: nothing to lose
    if not (folder / RECORD_NAME).is_file():
        raise ResultFileError(f"{out} exists and is not a headprune export (no {RECORD_NAME}); export into a new or "
                              "empty folder", settings=("out",))
    strangers = unrecorded(folder)
    if strangers:
        raise ResultFileError(f"{out} holds files its export did not write ({', '.join(strangers[:3])}"
                              f"{' ...' if len(strangers) > 3 else ''}); move them away, or export elsewhere",
                              settings=("out",))
    if not overwrite:
        raise ExportSettingsError(f"{out} holds a previous export; give overwrite to replace it (the new one is "
                                  "verified before the old one goes)", settings=("overwrite", "out"))


def final_check(out: Path, *, sources: Iterable[tuple[str, Path]], overwrite: bool) -> Callable[[Path], None]:
    """The rule :func:`headprune.core.io.atomic_folder` checks right before the verified export moves into place:
    ``out`` as at the start (another process may have made it, or put files in it, meanwhile: the folder lock binds
    headprune processes only), and the previous export it replaces once more after it is taken out of place."""
    sources = list(sources)

    def check(path: Path) -> None:
        if Path(path) == Path(out):
            check_destination(out, sources=sources, overwrite=overwrite)
        else:
            check_contents(Path(path), overwrite=overwrite, shown_as=Path(out))

    return check


def unrecorded(folder: Path) -> list[str]:
    """What an export folder holds besides the files its record lists (folders on the way to them aside).

    Raises:
        ResultFileError: an unreadable record.
    """
    record = read_record(folder)
    known = set(record.files) | {RECORD_NAME}
    parents = {str(parent) for name in known for parent in Path(name).parents if str(parent) != "."}
    found = []
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink() or name not in (known if path.is_file() else parents):
            found.append(name)
    return found
