"""Small parts of the journaled store: its errors, the writers/checkpoint gate, the journal id."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from journal.format import Position
from mqstore.errors import ConfigError, StoreError

ID_FILE = "journal-id"

log = logging.getLogger(__name__)


class JournalMasterSlaveError(ConfigError):
    """A local journal was combined with a lock that lets other brokers share the tables."""


class JournalBehindDatabaseError(StoreError):
    """The database holds a checkpoint this journal cannot be replayed from: the journal
    ends before it (cut by ``repair``, segments deleted, reset, an older copy restored),
    starts after it (its oldest segments are missing), or holds another history in which
    no record ends there (a copy from before a repair, or an older one)."""

    @classmethod
    def describe(
        cls,
        *,
        journal_id: str,
        directory: Path,
        table: str,
        stored: Position,
        start: Position,
        end: Position,
        no_record_ends_there: bool = False,
        stopped_at_ms: int | None = None,
    ) -> JournalBehindDatabaseError:
        """The refusal for checkpoint ``stored`` and a journal covering ``start..end``
        (``no_record_ends_there``: it covers ``stored``, but ``stored`` falls inside a record;
        ``stopped_at_ms``: when the database recorded the journal's broker stopping)."""
        found = f"the database holds checkpoint {stored} of journal {journal_id}, but "
        forget = f"`mqstore journal forget {journal_id} --yes`"
        unhelpful = (
            f"Deleting the journal's row from {table} instead does not help: a journal "
            "holding records without its row is refused."
        )
        fresh = (
            f"run {forget} (it finds nothing to forget if the broker had stopped cleanly), "
            f"then move {directory} away (keep it) and start with an empty journal "
            f"directory, which gets a new journal id. " + unhelpful
        )
        if stopped_at_ms is not None:
            return cls(
                found
                + _behind(directory, stored, start, end, no_record_ends_there)
                + f". Its broker stopped cleanly at {_utc(stopped_at_ms)}, as the database "
                f"records, its last checkpoint ({stored}) applying every write it had "
                "acknowledged: nothing acknowledged is lost (unless that stop on record is "
                f"{forget} accepting a loss), and what this directory holds is in the "
                f"database already. Move {directory} away (keep it) and start with an empty "
                "journal directory, which gets a new journal id; nothing needs forgetting. "
                + unhelpful
            )
        if no_record_ends_there:
            return cls(
                found + f"no record of the journal in {directory} ends there: the directory "
                "holds another history of this journal than the one the database "
                "checkpointed (a copy taken before `mqstore journal repair` cut the log, or "
                "an older copy restored over it). Restore the directory as the broker left "
                "it and start again. Otherwise, accepting the loss of every write "
                "acknowledged after the checkpoint: " + fresh
            )
        if stored.segment < start.segment:
            return cls(
                found + f"the journal in {directory} starts at {start}: segments "
                f"{stored.segment} to {start.segment - 1}, which held the writes acknowledged "
                "after the checkpoint, are missing (deleted, or lost in a copy), and the "
                "records after them cannot be replayed without them. Restore the missing "
                "segments into the directory and start again. Otherwise, accepting the loss "
                "of every write acknowledged after the checkpoint (the records this journal "
                "still holds too): " + fresh
            )
        return cls(
            found + f"the journal in {directory} ends at {end}, before it: "
            "`mqstore journal repair` cut the log behind the checkpoint (damage there), "
            "or its newest segments were deleted, or the directory was reset or restored "
            f"from an older copy. The writes acknowledged after {stored} are lost (a lost "
            "add is a message gone; a lost removal or ack, a message delivered again) "
            "unless the missing part can be restored (the deleted segments, a newer copy "
            "of the directory; not the one from before a repair, which repair would cut "
            "again). Everything the journal still holds is already in the database, so "
            "going on without the rest loses nothing more: " + fresh
        )


def _behind(
    directory: Path, stored: Position, start: Position, end: Position, no_record_ends_there: bool
) -> str:
    """How the journal in ``directory`` misses checkpoint ``stored``."""
    if no_record_ends_there:
        return (
            f"no record of the journal in {directory} ends there: the directory holds "
            "another history of this journal (a copy taken before `mqstore journal repair` "
            "cut the log, or an older copy restored over it)"
        )
    if stored.segment < start.segment:
        return (
            f"the journal in {directory} starts at {start}, after it: segments "
            f"{stored.segment} to {start.segment - 1} are missing"
        )
    return (
        f"the journal in {directory} ends at {end}, before it: its newest segments were "
        "deleted, `mqstore journal repair` cut the log, or the directory was reset or "
        "restored from an older copy"
    )


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


class JournalRowMissingError(StoreError):
    """The journal holds records but the database has no row (checkpoint position) for it."""

    @classmethod
    def describe(cls, journal_id: str, directory: Path, table: str) -> JournalRowMissingError:
        """The refusal for journal ``journal_id`` in ``directory``."""
        return cls(
            f"the journal in {directory} ({journal_id}) holds records, but the database has "
            f"no row for it in {table}: the row was deleted (a downgrade below revision "
            "0002 or to base, a re-created database, or by hand). Which of its records the "
            "database holds already cannot be told, and replaying them all could store "
            "messages twice or bring consumed ones back. If its broker stopped cleanly, "
            "everything in it is in the database (or went with the dropped tables): move "
            f"{directory} away (keep it) and start with an empty journal directory, which "
            "gets a new journal id."
        )


class JournalIdLostError(StoreError):
    """The journal holds records but its ``journal-id`` file is gone."""


class JournalDatabaseMismatchError(ConfigError):
    """The journal directory belongs to another database or table prefix."""


class JournalModeMismatchError(ConfigError):
    """The journal holds records to replay written in the other mode (plain or prioritized)."""


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
    ``holds_records``, or holds no journal id (empty, cut short, overwritten): which of the
    records the database already has cannot be told then. A journal without records gets a
    new id in place of a damaged one.
    """
    path = directory / ID_FILE
    if not path.exists():
        if holds_records:
            raise JournalIdLostError(
                f"the journal in {directory} holds records but its {ID_FILE} file is missing, "
                "so which of them the database already has cannot be told (replaying them "
                f"could store messages twice). Restore {path} from a backup of the "
                "directory; or, accepting the loss of the records not yet checkpointed, move "
                f"the *.wal files and the file 'newest' out of {directory} and start again "
                "with an empty journal."
            )
        return _new_journal_id(directory)
    data = path.read_bytes()
    found = _journal_id_in(data)
    if found is not None:
        return found
    if holds_records:
        raise JournalIdLostError(
            f"the journal in {directory} holds records but its {ID_FILE} file holds "
            f"{_shown(data)}, not a journal id (damaged or overwritten), so which of them "
            "the database already has cannot be told (replaying them could store messages "
            f"twice). Restore {path} from a backup of the directory (the id is also the "
            "journal_id of its row in the database's journal table); or, accepting the loss "
            f"of the records not yet checkpointed, move the *.wal files and the file "
            f"'newest' out of {directory} and start again with an empty journal."
        )
    log.warning(
        "%s holds %s, not a journal id; the empty journal gets a new one", path, _shown(data)
    )
    return _new_journal_id(directory)


def existing_journal_id(directory: Path) -> str | None:
    """The id in ``directory``'s journal-id file, without making one; None when there is
    no such file or it holds no id (a reader's look, unlike :func:`read_journal_id`)."""
    try:
        return _journal_id_in((directory / ID_FILE).read_bytes())
    except OSError:
        return None


def _journal_id_in(data: bytes) -> str | None:
    """The UUID text of a ``journal-id`` file's contents, or None if it holds none."""
    try:
        text = data.decode("ascii").strip()
        uuid.UUID(text)
    except ValueError:  # also UnicodeDecodeError
        return None
    return text


def _shown(data: bytes) -> str:
    if not data:
        return "nothing (0 bytes)"
    return f"{len(data)} bytes ({data[:40]!r}{'...' if len(data) > 40 else ''})"


def _new_journal_id(directory: Path) -> str:
    """Make a new journal id and store it durably (write, fsync, rename, fsync)."""
    directory.mkdir(parents=True, exist_ok=True)
    new = str(uuid.uuid4())
    tmp = directory / (ID_FILE + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(new + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, directory / ID_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return new
