"""An export directory's runs: its lock, a staged run put into place, dead runs undone.

A run writes everything into ``_staging/<run>/``, moves the files into place (their names
carry the run id: :func:`move_tagged`), writes ``_watermarks.json`` atomically (its
commit, :mod:`.export`'s), then cleans up. :func:`recover` undoes what a run that died
before its watermarks were written left behind. A run holds an exclusive ``flock`` on
``.lock`` throughout (:func:`export_lock`), so a second run into the same directory
refuses at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .archive_guard import STAGING, ArchiveError, unwritable
from .durable import fsync_all

#: The ids stored when a run read the table, one directory per run (the last one is kept).
SNAPSHOTS = "_snapshots"
#: The file a run holds ``flock``'ed.
LOCK_FILE = ".lock"


@dataclass(frozen=True)
class ExportLock:
    """The exclusive lock on an export directory (see :func:`export_lock`)."""

    directory: Path


@contextmanager
def export_lock(out_dir: str | os.PathLike[str]) -> Iterator[ExportLock]:
    """Hold ``out_dir/.lock`` (``flock``, exclusive; the directory is created), or raise
    :class:`ArchiveError` at once when another export holds it. Pass the lock to
    :func:`.export.export` to take it before a SparkSession starts (as ``mqstore export`` does)."""
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ArchiveError(unwritable(out, exc)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ArchiveError(
                f"another export is writing {out}: let it finish, then run again"
            ) from None
        yield ExportLock(out)
    finally:
        os.close(fd)  # releases the lock


def _tagged_files(root: Path, run_id: str) -> list[Path]:
    """The files under ``root`` that run ``run_id`` moved into place."""
    return [p for p in root.rglob(f"r{run_id}-*") if p.is_file()] if root.exists() else []


def recover(out_dir: Path, marks: dict[str, Any]) -> list[str]:
    """Undo runs that died before committing; returns their run ids."""
    undone: list[str] = []
    committed = marks.get("run_id")
    staging = out_dir / STAGING
    for run_dir in sorted(staging.iterdir()) if staging.exists() else []:
        run_id = run_dir.name
        if run_id != committed:
            for dataset in ("messages", "history"):
                for path in _tagged_files(out_dir / dataset, run_id):
                    path.unlink()
            undone.append(run_id)
        shutil.rmtree(run_dir, ignore_errors=True)
    keep = marks.get("snapshot")
    snaps = out_dir / SNAPSHOTS
    for snap in snaps.iterdir() if snaps.exists() else []:
        if snap.name != keep:
            shutil.rmtree(snap, ignore_errors=True)
    return undone


def move_tagged(src_root: Path, dst_root: Path, run_id: str) -> None:
    """Move the Parquet files of a staged dataset into place, tagging names with the run,
    and make them durable there (before the watermarks name them)."""
    if not src_root.exists():
        return
    moved: list[Path] = []
    for path in sorted(src_root.rglob("*.parquet")):
        target = dst_root / path.parent.relative_to(src_root) / f"r{run_id}-{path.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        moved.append(target)
    if moved:
        fsync_all([*moved, *{p.parent for p in moved}, dst_root])


def run_files(root: Path, run_id: str | None) -> list[str]:
    """:func:`_tagged_files` as strings (none without a run)."""
    return [str(p) for p in _tagged_files(root, run_id)] if run_id else []


__all__ = [
    "LOCK_FILE",
    "SNAPSHOTS",
    "ExportLock",
    "export_lock",
    "move_tagged",
    "recover",
    "run_files",
]
