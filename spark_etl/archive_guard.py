"""Whether an export directory may be used: written by ``export``, read by ``audit --archive``.

An export directory archives the tables of one database and table prefix, which its
``_watermarks.json`` names (:mod:`mqstore.archive`). Both jobs refuse a directory of another
database or prefix, unreadable watermarks, and exported Parquet files without watermarks;
the one-line message names the option (``--out`` or ``--archive``) and what to do instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mqstore.archive import Identity, origin_mismatch, read_watermarks
from mqstore.errors import ConfigError

WATERMARKS = "_watermarks.json"
STAGING = "_staging"
#: The run id in the name of a file a run moved into place (``r<run>-part-...``).
RUN_TAG = re.compile(r"^r(\d{8}T\d{6}-[0-9a-f]{8})-")


class ArchiveError(ConfigError):
    """An export directory a job must not use; the message says what to do."""


@dataclass(frozen=True)
class Use:
    """How a job uses an export directory: its option, and what to do instead of it."""

    option: str
    instead: str


#: ``export --out``: the directory is continued.
EXPORT = Use("--out", "export these tables into another --out directory")
#: ``audit --archive``: the directory's history is read.
AUDIT = Use("--archive", "give --archive the export directory of this database and --table-prefix")


def _load(out: Path, use: Use) -> dict[str, Any]:
    try:
        return read_watermarks(out) or {}
    except ConfigError as exc:
        raise ArchiveError(f"{exc}: restore it from a backup, or {use.instead}") from None


def load_watermarks(out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The committed watermarks (empty for a new export directory).

    Raises :class:`ArchiveError` when ``_watermarks.json`` is unreadable (truncated, blank).
    """
    return _load(Path(out_dir), EXPORT)


def _archived_file(out: Path) -> Path | None:
    """A Parquet file under ``messages/`` or ``history/`` that no crashed run owns."""
    staging = out / STAGING
    crashed = {p.name for p in staging.iterdir()} if staging.is_dir() else set()
    for dataset in ("messages", "history"):
        root = out / dataset
        for path in root.rglob("*.parquet") if root.is_dir() else ():
            tag = RUN_TAG.match(path.name)
            if tag is None or tag.group(1) not in crashed:
                return path
    return None


def uncommitted_runs(out: Path) -> set[str]:
    """Runs whose files may lie in ``out``'s datasets uncommitted: a run that died before
    writing the watermarks (undone by the next export) or one still running."""
    staging = out / STAGING
    if not staging.is_dir():
        return set()
    try:
        committed = (read_watermarks(out) or {}).get("run_id")
    except ConfigError:
        committed = None
    return {p.name for p in staging.iterdir()} - {committed}


def committed_files(dataset: Path) -> list[Path] | None:
    """The Parquet files of an export's ``dataset`` directory (``OUT/messages``,
    ``OUT/history``) less those of :func:`uncommitted_runs`; None when there are none of
    those (read the whole directory)."""
    skipped = uncommitted_runs(dataset.parent)
    if not skipped:
        return None
    return [
        path
        for path in sorted(dataset.rglob("*.parquet"))
        if (tag := RUN_TAG.match(path.name)) is None or tag.group(1) not in skipped
    ]


def unwritable(out: Path, exc: OSError) -> str:
    """One line for an ``--out`` directory that cannot be created or written."""
    where = f": {exc.filename}" if exc.filename else ""
    return (
        f"--out {out} cannot be written ({exc.strerror or exc}{where}): give a directory "
        "you can write"
    )


def check_archive(
    out_dir: str | os.PathLike[str], identity: Identity, prefix: str, use: Use = EXPORT
) -> dict[str, Any]:
    """The watermarks of ``out_dir`` for ``prefix``'s tables in the database ``identity``
    names (empty for a new directory).

    Raises :class:`ArchiveError` (one line: what is wrong and what to do) when ``out_dir``
    is not a directory, its watermarks are unreadable, or missing beside exported files, or
    describe another database or table prefix.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ArchiveError(f"{use.option} {out} is not a directory: {use.instead}")
    marks = _load(out, use)
    if not marks:
        orphan = _archived_file(out)
        if orphan is not None:
            raise ArchiveError(
                f"{out} holds exported Parquet files ({orphan.relative_to(out)}...) but no "
                f"{WATERMARKS}: restore it from a backup, or {use.instead}"
                + (" (exporting here again would archive every row twice)" if use is EXPORT else "")
            )
        return {}
    wrong = origin_mismatch(marks, identity, prefix)
    if wrong is not None:
        raise ArchiveError(f"{out} holds the export of other tables ({wrong}): {use.instead}")
    return marks


def history_archive(
    out_dir: str | os.PathLike[str],
    archive: str | os.PathLike[str] | None,
    identity: Identity,
    prefix: str,
) -> Path | None:
    """The export directory whose history an audit of ``prefix``'s tables in ``identity``'s
    database may read: ``archive``, else ``out_dir`` when it holds an export; None if none.

    Raises :class:`ArchiveError` when that directory is the export of another database or
    prefix (:func:`check_archive`), or when ``archive`` holds no finished export.
    """
    where = Path(archive if archive is not None else out_dir)
    use = AUDIT if archive is not None else Use("--out", AUDIT.instead)
    marks = check_archive(where, identity, prefix, use)
    if not marks and archive is not None:
        raise ArchiveError(
            f"--archive {where} holds no finished export ({WATERMARKS} is missing): give the "
            "directory passed to `mqstore export --out`, after at least one export has run"
        )
    return where if marks else None


__all__ = [
    "AUDIT",
    "EXPORT",
    "RUN_TAG",
    "STAGING",
    "WATERMARKS",
    "ArchiveError",
    "Use",
    "check_archive",
    "committed_files",
    "history_archive",
    "load_watermarks",
    "uncommitted_runs",
    "unwritable",
]
