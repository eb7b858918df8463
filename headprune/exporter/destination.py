"""Where an export may be written, decided before anything is: the rules that keep it from replacing what is not
headprune's own.

An export replaces its folder as a whole (once the new one is verified), so ``out`` must be a folder nothing of
value can be lost from: one that does not exist yet, an empty one (used as it is: the files are moved into it, and
the folder itself, perhaps a mount point or one with its own permissions, stays), or a previous headprune export
(recognised by its record, holding nothing the record does not list) with ``overwrite``. Refused: the source
model's folder and any folder inside it or holding it, a folder holding a find run, a filesystem root or the home
folder, a symbolic link, and a folder of other files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from headprune.core.io import refuse_unsafe_output, user_path
from headprune.errors import ExportSettingsError, ResultFileError
from headprune.exporter.export_record import RECORD_NAME, read_record
from headprune.search.find_result import RESULT_NAME
from headprune.search.journal import JOURNAL_NAME


def local_sources(model: object) -> list[Path]:
    """The files and folders on this machine that ``model`` (a spec, or a loaded model) is read from."""
    folder = getattr(model, "folder", None)
    if isinstance(folder, Path):  # a loaded model: its folder (a model built in memory has none)
        return [folder] if (folder / "config.json").is_file() else []
    try:
        path = user_path(str(model))
        return [path] if path.exists() else []
    except (OSError, ValueError):
        return []


def check_destination(out: Path, *, sources: Iterable[Path] = (), overwrite: bool = False) -> None:
    """Refuse an ``out`` folder an export must not write (see the module's rules).

    Raises:
        ResultFileError: a folder that is not headprune's to replace. ExportSettingsError: a previous export,
        without ``overwrite``.
    """
    out = Path(out)
    refuse_unsafe_output(out)
    if out.is_symlink():  # replacing it would replace the link, and leave what it points to
        raise ResultFileError(f"{out} is a symbolic link; give the folder it points to", settings=("out",))
    target = user_path(out).resolve()
    for source in sources:
        source = Path(source).resolve()
        if target == source or target.is_relative_to(source) or source.is_relative_to(target):
            where = ("is" if target == source else "lies inside" if target.is_relative_to(source) else "holds")
            raise ResultFileError(f"{out} {where} the source model ({source}); export into a folder of its own",
                                  settings=("out",))
    if not out.exists():
        return
    if not out.is_dir():
        raise ResultFileError(f"{out} exists and is not a folder", settings=("out",))
    run = [name for name in (JOURNAL_NAME, RESULT_NAME) if (out / name).exists()]
    if run:
        raise ResultFileError(f"{out} holds a find run ({', '.join(run)}); export into a folder of its own",
                              settings=("out",))
    if not any(out.iterdir()):
        return  # empty: nothing to lose
    if not (out / RECORD_NAME).is_file():
        raise ResultFileError(f"{out} exists and is not a headprune export (no {RECORD_NAME}); export into a new or "
                              "empty folder", settings=("out",))
    strangers = unrecorded(out)
    if strangers:
        raise ResultFileError(f"{out} holds files its export did not write ({', '.join(strangers[:3])}"
                              f"{' ...' if len(strangers) > 3 else ''}); move them away, or export elsewhere",
                              settings=("out",))
    if not overwrite:
        raise ExportSettingsError(f"{out} holds a previous export; give overwrite to replace it (the new one is "
                                  "verified before the old one goes)", settings=("overwrite", "out"))


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
