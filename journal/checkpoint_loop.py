"""The checkpoint thread of a journaled store: when to checkpoint, and what to do when the
database or the master lock is not there."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from mqstore.errors import DatabaseUnavailableError, LockLostError

if TYPE_CHECKING:
    from journal.store import JournaledStore

__all__ = ["run_checkpoints"]

log = logging.getLogger("journal.store")


def run_checkpoints(
    store: JournaledStore, wake: threading.Event, stopping: threading.Event
) -> None:
    """Checkpoint ``store`` every interval (or when ``wake`` is set) until ``stopping``.

    While the lease cannot be renewed (the database does not answer) checkpoints pause, and
    resume once it is; when another broker took the lock they stop: the journal keeps its
    records for the next start, which applies them once this broker holds the lock again.
    """
    paused = False  # the lock was not held at the last turn
    failing = False  # the last checkpoint failed for want of the database or the lock
    while not stopping.is_set():
        wake.wait(store.checkpoint_interval_s)
        wake.clear()
        if stopping.is_set():
            return
        if store.pg.lock_lost:
            log.warning(
                "journal checkpoints stopped: this broker lost the master lock; what it "
                "journaled stays in %s for its next start to apply",
                store.journal_dir,
            )
            return
        if not store.pg.locker.is_held():
            if not paused:
                log.warning(
                    "journal checkpoints paused: the lease could not be renewed; they "
                    "resume once it is"
                )
            paused = True
            stopping.wait(min(1.0, store.checkpoint_interval_s))
            continue
        if paused:
            log.info("journal checkpoints resume: the lease is renewed")
            paused = False
        try:
            store.checkpoint()
            failing = False
        except (DatabaseUnavailableError, LockLostError) as exc:
            if not failing:  # one line per outage, not a traceback per retry
                log.warning("journal checkpoint failed; retrying: %s", exc)
            failing = True
            stopping.wait(min(1.0, store.checkpoint_interval_s))
        except Exception:  # keep checkpointing; the state stays until one succeeds
            log.exception("journal checkpoint failed; retrying")
            stopping.wait(min(1.0, store.checkpoint_interval_s))
