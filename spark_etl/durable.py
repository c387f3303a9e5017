"""Making the archive's files durable before ``_watermarks.json`` says they exist: after a
power loss the watermarks must never point past Parquet files the disk did not keep
(``mqstore history trim --exported`` deletes the database rows they cover)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


def fsync_path(path: Path) -> None:
    """fsync a file, or a directory (its entries: names created, renamed or removed)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader, or the disk after a crash, sees the
    old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_path(path.parent)


def fsync_all(paths: Iterable[Path]) -> None:
    """fsync each of ``paths`` and every directory holding one, once each."""
    done: set[Path] = set()
    for path in paths:
        for target in (path, path.parent):
            if target not in done:
                fsync_path(target)
                done.add(target)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root``, ``root`` and its parent."""
    fsync_all([*sorted(root.rglob("*")), root])
