"""Starting and stopping a journaled store: its journal opened and checked against the
database, replayed into the window, marked running, and its threads started; on stop, a
final checkpoint when it can be made, the journal marked stopped cleanly and closed."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from journal import runs
from journal.checkpoint import read_position, settled_position
from journal.checkpoint_loop import run_checkpoints, run_maintenance
from journal.checkpointing import Checkpoints
from journal.errors import JournalCorruptError, JournalError, JournalPositionError
from journal.format import Position
from journal.mode import settle_mode
from journal.opening import open_store_journal, unusable
from journal.repair import repair
from journal.support import (
    JournalBehindDatabaseError,
    JournalLeftRunningError,
    JournalRowMissingError,
    JournalUnusableError,
    existing_journal_id,
)
from journal.writer import Journal
from mqstore.errors import DatabaseUnavailableError, StoreClosedError

__all__ = ["Lifecycle"]

log = logging.getLogger("journal.store")


class Lifecycle(Checkpoints):
    """Start and stop of :class:`journal.store.JournaledStore`, whose ``__init__`` sets up the
    state declared here."""

    journal_dir: Path
    sync_policy: str
    segment_size: int
    max_pending_bytes: int
    maintenance_interval_s: float
    _started: bool
    _wake: threading.Event
    _stopping: threading.Event
    _thread: threading.Thread | None
    _maintenance: threading.Thread | None

    @property
    def journal(self) -> Journal:
        if self._journal is None:
            raise StoreClosedError("the journaled store is not started (call start() first)")
        return self._journal

    @property
    def failure(self) -> BaseException | None:
        """What made the journal fail (a write, sync or rotation), once it did: then every
        write is refused until a restart replays the journal."""
        journal = self._journal
        return journal.failure if journal is not None else None

    def start(self) -> None:
        """Start the database store, open and replay the journal, start checkpointing."""
        if self._started:
            return
        if not self.pg.started:
            self.pg.start()
        try:
            self._journal, self.journal_id = open_store_journal(
                self.journal_dir,
                self.pg,
                segment_size=self.segment_size,
                sync_policy=self.sync_policy,
            )
            self._refuse_if_another_was_left_running()
            with self._lock:  # the database may have changed while the store was stopped
                self._admission.forget_locked()
            self._replay()
            with self.pg.transaction() as conn:
                start = self._journal.start_position
                runs.mark_running(conn, self.pg.schema, self.journal_id, start, self._owner)
        except BaseException as exc:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            corrupt = exc if isinstance(exc, JournalCorruptError) else exc.__cause__
            note = self._applied_note() if isinstance(corrupt, JournalCorruptError) else ""
            self.pg.stop()
            if note:
                raise JournalUnusableError(f"{corrupt} {note}") from corrupt
            if isinstance(exc, JournalError):  # damage found only on replay, say
                raise JournalUnusableError(str(exc)) from exc
            raise
        self._stopping.clear()
        self._started = True
        self._thread = threading.Thread(
            target=run_checkpoints,
            args=(self, self._wake, self._stopping),
            name="mqstore-checkpoint",
            daemon=True,
        )
        self._thread.start()
        if self.maintenance_interval_s > 0:
            self._maintenance = threading.Thread(
                target=run_maintenance,
                args=(self, self.maintenance_interval_s, self._stopping),
                name="mqstore-cleanup",
                daemon=True,
            )
            self._maintenance.start()

    def _applied_note(self) -> str:
        """What to add to the refusal of a damaged journal whose damage all lies before the
        position the database has applied: repairing it loses nothing. Empty otherwise, or
        when that cannot be told (no journal id, no stored position, database unreachable)."""
        journal_id = existing_journal_id(self.journal_dir)
        if journal_id is None:
            return ""
        try:
            stored = read_position(self.pg, journal_id)
            plan = repair(self.journal_dir, dry_run=True, database_position=stored)
        except (JournalError, DatabaseUnavailableError, OSError) as exc:
            log.debug("cannot tell whether the damage was applied: %s", exc)
            return ""
        if not plan.lost_applied_only:
            return ""
        return (
            f"The damage all lies before {stored}, the position the database has applied: "
            "its records are in the database already, so the repair loses nothing."
        )

    @property
    def _owner(self) -> str:
        return self.broker_name or self.pg.locker.holder

    def _refuse_if_another_was_left_running(self) -> None:
        """Refuse to start on this journal while another one of the database holds writes
        its broker acknowledged and no checkpoint applied (see :mod:`journal.runs`)."""
        others = self.pg.read(lambda conn: runs.unfinished(conn, self.pg.schema, self.journal_id))
        if not others:
            return
        last = others[-1]
        raise JournalLeftRunningError(
            f"{last.describe()} did not stop cleanly, and this broker's journal in "
            f"{self.journal_dir} is another one ({self.journal_id}): what that broker "
            "acknowledged after its last checkpoint exists only in its journal directory. "
            "Start the broker on that directory (--journal-dir) to apply it; or, if it is "
            f"lost, accept the loss with `mqstore journal forget {last.journal_id}` and "
            "start again" + (f" (and so for {len(others) - 1} more)" if len(others) > 1 else "")
        )

    def _replay(self) -> None:
        """Rebuild the pending state from records after the stored checkpoint."""
        journal = self.journal
        stored, last_id = settled_position(self.pg, self.journal_id)
        self.pg.advance_sequence(last_id)
        end = journal.position
        start = journal.start_position
        if stored is not None and (stored > end or stored.segment < start.segment):
            raise self._cannot_replay_from(stored)
        if stored is None and end > start:  # mark_running makes the row before any record
            raise JournalRowMissingError.describe(
                self.journal_id, self.journal_dir, self.pg.schema.journal.name
            )
        last = stored
        # What the database holds: the stored position, or the start, where the row is made.
        self._last_position = stored if stored is not None else start
        top = 0  # the highest ID replayed, also from windows checkpointed on the way
        try:
            # Before anything is applied: records of the other mode mean something else.
            pending = (ops for _end, ops in journal.recover(after=stored))
            try:
                settle_mode(self.journal_dir, self.pg.prioritized, pending)
            except OSError as exc:  # mode.json could not be written: nothing was replayed
                raise unusable(self.journal_dir, exc) from exc
            for position, ops in journal.recover(after=stored):
                self._state.apply(ops)
                self._counters["replayed"] += 1
                last = position
                if self._state.pending_bytes >= self.max_pending_bytes:
                    top = max(top, self._state.max_id)
                    self._checkpoint_state(position)
        except JournalPositionError as exc:  # raised before any record of it was applied
            assert stored is not None
            raise self._cannot_replay_from(stored, no_record_ends_there=True) from exc
        if last is not None and not self._state.empty:
            log.info("journal %s replayed up to %s", self.journal_dir, last)
        self.pg.advance_sequence(max(top, self._state.max_id))
        self._applied_end = end

    def _cannot_replay_from(
        self, stored: Position, *, no_record_ends_there: bool = False
    ) -> JournalBehindDatabaseError:
        journal = self.journal
        try:  # read before this start marks the journal running again
            stopped = self.pg.read(
                lambda conn: runs.stopped_at(conn, self.pg.schema, self.journal_id)
            )
        except DatabaseUnavailableError:
            stopped = None  # then worded as if it had not stopped cleanly
        return JournalBehindDatabaseError.describe(
            journal_id=self.journal_id,
            directory=self.journal_dir,
            table=self.pg.schema.journal.name,
            stored=stored,
            start=journal.start_position,
            end=journal.position,
            no_record_ends_there=no_record_ends_there,
            stopped_at_ms=stopped,
        )

    def stop(self, *, checkpoint: bool = True) -> None:
        """Final checkpoint, close the journal, stop the database store. Idempotent.

        ``checkpoint=False`` leaves the window in the journal for the next start to replay
        (a fast shutdown; also how tests simulate a crash without killing the process).
        """
        if not self._started:
            return
        self._stopping.set()
        self._wake.set()
        if self._maintenance is not None:
            self._maintenance.join(timeout=30)
        if self._thread is not None:
            self._thread.join(timeout=30)
        stuck = any(t is not None and t.is_alive() for t in (self._thread, self._maintenance))
        try:
            if checkpoint and stuck:
                log.warning(
                    "no final journal checkpoint: the last one is still waiting for the "
                    "database; what it journaled stays in %s for its next start to apply",
                    self.journal_dir,
                )
            elif checkpoint and not self._holds_lock():
                log.warning(
                    "no final journal checkpoint: this broker does not hold the master lock "
                    "(%s); what it journaled stays in %s for its next start to apply",
                    self.pg.locker.lost_reason or "its lease could not be renewed",
                    self.journal_dir,
                )
            elif checkpoint:
                try:
                    self.checkpoint()
                    self._mark_stopped()
                except DatabaseUnavailableError as exc:
                    log.warning(
                        "no final journal checkpoint: %s; what it journaled stays in %s for "
                        "its next start to apply",
                        exc,
                        self.journal_dir,
                    )
        finally:
            self._started = False
            with self._space:
                self._space.notify_all()
            self.journal.close()
            self._journal = None
            self.pg.stop()

    def _holds_lock(self) -> bool:
        return not self.pg.lock_lost and self.pg.locker.is_held()

    def _mark_stopped(self) -> None:
        """After the final checkpoint: stamp the journal as stopped cleanly, if nothing of
        it is left unapplied (then a start on another journal loses nothing)."""
        with self._space:
            left = not self._state.empty
        if left:
            return
        with self.pg.transaction() as conn:
            runs.mark_stopped(conn, self.pg.schema, self.journal_id)
