"""Small parts of the journaled store: its errors, the writers/checkpoint gate, the journal id."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mqstore.errors import ConfigError, StoreError

ID_FILE = "journal-id"


class JournalMasterSlaveError(ConfigError):
    """A local journal was combined with a lock that lets other brokers share the tables."""


class JournalBehindDatabaseError(StoreError):
    """The database holds a checkpoint beyond the end of this journal (journal lost or reset)."""


class JournalIdLostError(StoreError):
    """The journal holds records but its ``journal-id`` file is gone."""


class JournalDatabaseMismatchError(ConfigError):
    """The journal directory belongs to another database or table prefix."""


class JournalLeftRunningError(StoreError):
    """Another journal of this database was left running: its writes may live only there."""


class JournalUnusableError(StoreError):
    """The journal directory cannot be opened (damaged, locked, unreadable, newer format)."""


class WouldBlock(Exception):  # noqa: N818 - a signal, not an error
    """A write asked not to wait (``wait=False``) would have had to; nothing was written."""


class WriterGate:
    """Writers share it; a checkpoint (or XA work) takes it alone. Waiting exclusives win."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self, *, wait: bool = True) -> Iterator[None]:
        """Held by a writer; ``wait=False`` raises :class:`WouldBlock` instead of waiting."""
        with self._cond:
            while self._exclusive or self._waiting:
                if not wait:
                    raise WouldBlock
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._shared:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


def read_journal_id(directory: Path, *, holds_records: bool = False) -> str:
    """The journal's UUID, created (durably) on first use.

    Refused with :class:`JournalIdLostError` when the file is missing from a journal that
    ``holds_records``: which of them the database already has cannot be told then.
    """
    path = directory / ID_FILE
    if path.exists():
        return path.read_text().strip()
    if holds_records:
        raise JournalIdLostError(
            f"the journal in {directory} holds records but its {ID_FILE} file is missing, so "
            "which of them the database already has cannot be told (replaying them could "
            f"store messages twice). Restore {path} from a backup of the directory; or, "
            "accepting the loss of the records not yet checkpointed, move the *.wal files "
            f"and the file 'newest' out of {directory} and start again with an empty journal."
        )
    directory.mkdir(parents=True, exist_ok=True)
    new = str(uuid.uuid4())
    tmp = directory / (ID_FILE + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(new + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return new
