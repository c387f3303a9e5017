"""The start lock: an exclusive ``flock`` on ``<data_dir>/.pg-start`` that initdb, ``pg_ctl
start`` and ``pg_ctl stop`` run under. Its holder writes its pid and what it does into the
file, so a process that has to wait for it can say whom it waits for."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def take(fd: int, pgdata: Path, doing: str) -> None:
    """Take the start lock on ``fd`` (blocking); say once, on stderr, that this process
    waits when another holds it. ``doing`` (``starting``, ``stopping``) is recorded."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        who = (
            f"another mqstore process (pid {holder[0]}), which is {holder[1]}"
            if holder
            else "another mqstore process, which is starting or stopping"
        )
        log.warning(
            "waiting for %s the embedded PostgreSQL in %s (initdb, or a start that first "
            "recovers after a crash, can take a while)",
            who, pgdata,
        )  # fmt: skip
        fcntl.flock(fd, fcntl.LOCK_EX)
    with contextlib.suppress(OSError):  # only for the message of a process that waits
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {doing}\n".encode(), 0)


def release(fd: int) -> None:
    """Release the start lock taken on ``fd`` with :func:`take`, and close ``fd``."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
    os.close(fd)


def _holder(fd: int) -> tuple[int, str] | None:
    """The pid and the doing the holder of the lock recorded, if it did."""
    try:
        pid, doing = os.pread(fd, 64, 0).decode().split()
        return int(pid), doing
    except (OSError, ValueError, UnicodeDecodeError):
        return None
