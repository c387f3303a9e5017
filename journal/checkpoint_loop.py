"""The background threads of a journaled store: the checkpoint thread (when to checkpoint,
and what to do when the database or the master lock is not there) and the maintenance
thread (topic cleanup and history trim)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from mqstore.errors import DatabaseUnavailableError, LockLostError

if TYPE_CHECKING:
    from journal.store import JournaledStore

__all__ = ["run_checkpoints", "run_maintenance"]

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


def run_maintenance(store: JournaledStore, every_s: float, stopping: threading.Event) -> None:
    """Every ``every_s`` until ``stopping``: the database store's maintenance with
    ``store.cleanup()``. It stands in for the database store's own thread, whose cleanup
    would not see the window: a retroactive subscription only journaled yet would lose the
    messages the other subscriptions acknowledged."""
    while not stopping.wait(every_s):
        store.pg.maintain(store.cleanup)
