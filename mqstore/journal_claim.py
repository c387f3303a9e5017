"""One ``mqstore serve`` per journal directory: the flock a journaled serve holds on
``JOURNAL_DIR/serve.lock`` for its whole run, and the one-line refusal of a second."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from mqstore.errors import ConfigError
from mqstore.settings import Settings

#: The file in the journal directory that a journaled ``mqstore serve`` holds an flock on
#: (and writes its pid into) for its whole run.
SERVE_LOCK_FILE = "serve.lock"


@contextmanager
def claim_journal(settings: Settings) -> Iterator[None]:
    """Make the journal directory this process's for the block, or refuse at once naming
    the ``mqstore serve`` that has it.

    An flock on ``JOURNAL_DIR/serve.lock`` (taken before the data directory is otherwise
    used, even when it is new): of two serves started at the same instant on the same
    data directory exactly one goes on. The kernel drops the lock when the process dies.
    """
    directory = settings.resolved_journal_dir
    if not settings.journal:
        yield
        return
    made = [d for d in (directory, *directory.parents) if not d.exists()]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / SERVE_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:  # said before an embedded store is made, and a lock taken, in vain
        raise ConfigError(
            f"cannot use the journal directory {directory}: {exc.strerror or exc} "
            f"({exc.filename or directory}); give --journal-dir (or --data-dir) a directory "
            "this broker can write to"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _journal_in_use(
                f"journal directory {directory} is locked by another process "
                f"(pid {_holder(fd)}); stop it first, two writers must never share a journal"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            refuse_journal_in_use(settings)  # held by a journal tool (repair), say
            yield
        finally:
            with suppress(OSError):  # no pid of a process that is gone for the next to read
                os.ftruncate(fd, 0)
            _unmake(made)
    finally:
        os.close(fd)


def _unmake(made: list[Path]) -> None:
    """Remove the directories a serve that never got to its journal made (deepest first)
    with the lock files it left in them, so no empty data or journal directory is left to
    pass for a store. A journal directory holding anything else stays."""
    from journal.segments import LOCK_FILE_NAME

    locks = {SERVE_LOCK_FILE, LOCK_FILE_NAME}
    # An OSError (the directory gone or changed meanwhile) leaves things as they are: the
    # error that ends the serve is the one to report.
    with suppress(OSError):
        if not made or any(p.name not in locks for p in made[0].iterdir()):
            return
        for name in locks:
            (made[0] / name).unlink(missing_ok=True)
        for directory in made:
            directory.rmdir()


def _holder(fd: int) -> str:
    """The pid the holder of the flock on ``fd`` wrote, once it has (it writes it just after
    taking the lock); ``unknown`` if it never does."""
    deadline = time.monotonic() + 2
    while True:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if pid or time.monotonic() > deadline:
            return pid or "unknown"
        time.sleep(0.01)


def _journal_in_use(message: str) -> ConfigError:
    """The refusal of a second ``mqstore serve`` on a journal directory in use."""
    return ConfigError(
        f"{message} (is another `mqstore serve` running on this --data-dir? A second broker "
        "needs its own --data-dir or --journal-dir)"
    )


def refuse_journal_in_use(settings: Settings) -> None:
    """Refuse at once when another process (a second ``mqstore serve`` on the same data
    directory, say) holds the journal, instead of waiting for the lease it holds under this
    same broker name and then blaming the name."""
    directory = settings.resolved_journal_dir
    if not settings.journal or not directory.is_dir():
        return
    from journal.errors import JournalLockedError
    from journal.segments import DirectoryLock

    try:
        DirectoryLock(directory).acquire().release()
    except JournalLockedError as exc:
        raise _journal_in_use(str(exc)) from None
    except OSError:
        return  # starting the journal says what is wrong with the directory
