"""Checkpoints of a journaled store: the window copied with writers held, written to the
database with its journal position in one transaction, and rebuilt from the records
journaled meanwhile; a checkpoint that reported a failure is told apart from one that
committed after all (its reply lost), so nothing is applied twice."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from journal.admission import Admission
from journal.checkpoint import CheckpointResult, position_after_failure
from journal.errors import JournalError
from journal.format import Position
from journal.reads import MergedReads
from journal.records import Op
from journal.state import PendingState
from journal.support import WriterGate
from journal.writer import Journal

__all__ = ["Checkpoints"]

log = logging.getLogger("journal.store")


class Checkpoints(MergedReads):
    """Checkpoints of :class:`journal.store.JournaledStore`, whose ``__init__`` sets up the
    state declared here; it also writes the window (``_apply``)."""

    journal_id: str
    broker_name: str | None
    archive_dir: Path | None
    _journal: Journal | None
    _gate: WriterGate
    _space: threading.Condition
    _admission: Admission
    _checkpointing: threading.Lock
    _unsure: bool
    _last_position: Position
    _applied_end: Position
    _tail: list[tuple[int, list[Op]]] | None
    #: Checkpoints that raised (counted under ``_lock``), and when the last one succeeded
    #: (seconds since the epoch; 0: none yet), read without a lock by checkpoint_figures.
    _ckpt_failures: int
    _ckpt_succeeded_at: float

    def _new_state(self) -> PendingState:
        return PendingState(keep_history=self.pg.history, keep_bodies=self.pg.history_bodies)

    def _apply(self, window: PendingState, position: Position) -> CheckpointResult:
        """Write ``window`` and ``position`` to the database in one transaction."""
        raise NotImplementedError

    def checkpoint(self) -> CheckpointResult | None:
        """Apply everything acknowledged so far to the database; None if nothing was new.

        Writers are held only while the window is copied and while it is rebuilt after the
        commit, never during the database work: a slow or stalled database holds back
        writers only once the pending window is full. One that raises is counted as failed;
        one that applied the window, or found it empty, as succeeded.
        """
        try:
            return self._checkpoint()
        except Exception:
            self._checkpoint_failed()
            raise

    def _checkpoint_failed(self) -> None:
        with self._lock:
            self._ckpt_failures += 1

    def _checkpoint(self) -> CheckpointResult | None:
        with self._checkpointing:
            if self._unsure:
                # Only checkpoints write it; the failed one may still be committing.
                stored = position_after_failure(self.pg, self.journal_id)
                with self._gate.exclusive():
                    self._resync_window(stored)
            with self._gate.exclusive():
                if self._state.empty:
                    self._ckpt_succeeded_at = time.time()  # the database holds it all
                    return None
                position = self._window_end()
                window = self._state.copy()
                with self._lock:
                    self._state.in_flight = window.adds
                    self._tail = []
            try:
                result = self._apply(window, position)
            except BaseException:
                with self._lock:
                    # The window still holds everything, and its adds stay in flight until a
                    # checkpoint tells whether this one committed after all.
                    self._tail = None
                self._unsure = True  # it may have failed after its commit (a lost reply)
                raise
            with self._gate.exclusive():
                rebuilt = self._new_state()
                for now, ops in self._tail or ():
                    rebuilt.apply(ops, now)
                with self._space:
                    self._tail = None
                    self._state = rebuilt
                    self._admission.applied_locked(window.removed, window.purged)
                    self._space.notify_all()
                self._last_position = position
            self._ckpt_succeeded_at = time.time()
        if self._journal is not None and not self._journal.failed:
            self._journal.release(position, self._archive())
        return result

    def _archive(self) -> Path | None:
        """Where released segments go: ``archive_dir/<journal id>/``, so the segments of
        another journal (a recreated directory numbers its segments from 1 again, and
        brokers may share one archive) are never overwritten."""
        return None if self.archive_dir is None else self.archive_dir / self.journal_id

    def _window_end(self) -> Position:
        """The position a checkpoint of the window stores: the end of the durable log (never
        ahead of it, whatever the sync policy), or, once the log failed, the end of the last
        record applied: what was acknowledged then may live on only in the window."""
        try:
            return self.journal.sync()
        except JournalError:
            if not self.journal.failed:
                raise
            log.warning("the journal failed: checkpointing its window up to %s", self._applied_end)
            return self._applied_end

    def _checkpoint_locked(self) -> CheckpointResult | None:
        """Checkpoint with writers held off throughout (XA work and cleanup need that)."""
        try:
            if self._unsure:
                self._resync_window(position_after_failure(self.pg, self.journal_id))
            if self._state.empty:
                self._ckpt_succeeded_at = time.time()
                return None
            position = self._window_end()
            try:
                result = self._checkpoint_state(position)
            except BaseException:
                self._unsure = True  # it may have failed after its commit (a lost reply)
                raise
        except Exception:
            self._checkpoint_failed()
            raise
        self._ckpt_succeeded_at = time.time()
        return result

    def _resync_window(self, stored: Position | None) -> None:
        """After a failed checkpoint: if the database holds a later position (``stored``)
        than this store applied (the commit went through, its reply was lost), rebuild the
        window from the journal records after it, as a restart would, so nothing is applied
        twice. Writers must be held off.
        """
        if stored is not None and stored > self._last_position:
            state = self._new_state()
            # A failed journal cannot be read back; once the commit covers every record
            # applied, nothing is left for the window (no record came after them).
            if not (self.journal.failed and stored >= self._applied_end):
                for _end, ops in self.journal.recover(after=stored):
                    state.apply(ops)
            with self._space:
                self._state = state
                self._admission.forget_locked()  # what the lost commit deleted is not told
                self._space.notify_all()
            self._last_position = stored
            log.warning(
                "journal checkpoint up to %s had been committed although it reported a failure; "
                "the window was rebuilt from the journal after it",
                stored,
            )
        self._unsure = False

    def _checkpoint_state(self, position: Position) -> CheckpointResult:
        window = self._state
        result = self._apply(window, position)
        self._last_position = position
        with self._space:
            self._state = self._new_state()
            self._admission.applied_locked(window.removed, window.purged)
            self._space.notify_all()
        return result
