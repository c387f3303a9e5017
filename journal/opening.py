"""Opening a store's journal: the log, its id and its database, or one clear error."""

from __future__ import annotations

import errno
from pathlib import Path

from journal.binding import check_binding
from journal.errors import JournalError
from journal.support import JournalUnusableError, read_journal_id
from journal.writer import Journal
from mqstore.store.postgres import PostgresStore

__all__ = ["open_store_journal", "unusable"]


def open_store_journal(
    directory: Path, pg: PostgresStore, *, segment_size: int, sync_policy: str
) -> tuple[Journal, str]:
    """Open and lock the journal in ``directory`` for ``pg``; return it and its id.

    Raises :class:`JournalUnusableError` (its cause the journal's own error) when the
    directory cannot be used, and the store errors of :func:`read_journal_id` and
    :func:`check_binding` when it belongs elsewhere.
    """
    try:
        journal = Journal.open(directory, segment_size=segment_size, sync_policy=sync_policy)
    except JournalError as exc:
        raise JournalUnusableError(str(exc)) from exc
    except OSError as exc:
        raise unusable(directory, exc) from exc
    try:
        holds = journal.position > journal.start_position
        journal_id = read_journal_id(directory, holds_records=holds)
        check_binding(directory, pg, holds_records=holds)
    except OSError as exc:
        journal.close()
        raise unusable(directory, exc) from exc
    except BaseException:
        journal.close()
        raise
    return journal, journal_id


def unusable(directory: Path, exc: OSError) -> JournalUnusableError:
    """The error of a journal directory the OS refused (``exc``), with what to do."""
    where = f" ({exc.filename})" if exc.filename else ""
    hint = _HINTS.get(exc.errno or 0, "give --journal-dir a directory this broker can use")
    return JournalUnusableError(
        f"cannot open the journal in {directory}: {exc.strerror or exc}{where}; {hint}"
    )


_ACCESS = "the user running mqstore needs read and write access to the directory and its files"
_HINTS = {
    errno.ENOSPC: "free space on its file system",
    errno.EACCES: _ACCESS,
    errno.EPERM: _ACCESS,
    errno.EROFS: "its file system is read-only; mount it writable",
}
