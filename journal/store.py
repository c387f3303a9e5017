"""The journaled store: the store port with a local write-ahead journal in front of PostgreSQL.

Writes are acknowledged once their journal record is durable (group commit) and applied to
an in-memory :class:`~journal.state.PendingState`; reads merge that state with the database;
a checkpoint thread applies the net effect to the database in one transaction together with
the journal position (see :mod:`journal.checkpoint`). XA work and topic cleanup first
checkpoint, then run on the database directly while writers are held.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from journal import runs
from journal.admission import Admission, Claims, Key
from journal.checkpoint import (
    CheckpointResult,
    apply_checkpoint,
    position_after_failure,
    settled_position,
)
from journal.checkpoint_loop import run_checkpoints, run_maintenance
from journal.errors import JournalError, JournalPositionError
from journal.format import Position
from journal.merge import DatabaseView
from journal.mode import settle_mode
from journal.opening import open_store_journal, unusable
from journal.reads import MergedReads
from journal.records import (
    AckSubscription,
    AddMessage,
    AddSubscription,
    DeleteSubscription,
    Op,
    PurgeDestination,
    RemoveMessages,
    UpdateMessage,
)
from journal.state import PendingState, encode_target
from journal.support import (
    JournalBehindDatabaseError,
    JournalDatabaseMismatchError,
    JournalIdLostError,
    JournalLeftRunningError,
    JournalMasterSlaveError,
    JournalModeMismatchError,
    JournalRowMissingError,
    JournalUnusableError,
    WouldBlock,
    WriterGate,
)
from journal.writer import DEFAULT_SEGMENT_SIZE, Journal
from mqstore.errors import (
    DatabaseUnavailableError,
    JournalUnavailableError,
    MessageNotFoundError,
    StoreClosedError,
)
from mqstore.store.model import (
    EXPIRE_MAX_BYTES,
    Ack,
    Batch,
    NewMessage,
    Outcome,
    PreparedTransaction,
    Removal,
    StoredMessage,
    Subscription,
    SubscriptionKey,
    Xid,
    within_bytes,
)
from mqstore.store.postgres import PostgresStore
from mqstore.store.validation import (
    check_batch,
    check_body,
    check_container,
    check_subscription,
    check_topic,
    check_work,
)

__all__ = [
    "JournalBehindDatabaseError",
    "JournalDatabaseMismatchError",
    "JournalIdLostError",
    "JournalMasterSlaveError",
    "JournalModeMismatchError",
    "JournalRowMissingError",
    "JournalUnusableError",
    "JournaledStore",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class JournalWriteError(JournalError, JournalUnavailableError):
    """A write the journal did not take, raised as the store port's errors are (a
    :class:`~mqstore.errors.StoreError`): its disk is full, or it failed."""


@dataclass(slots=True)
class _Applying:
    """A journaled record waiting in line to be applied; ``removed`` once it is."""

    ops: list[Op]
    removed: int | None = None


class JournaledStore(MergedReads):
    """The store port (:class:`mqstore.store.port.Store`) with a local journal.

    ``pg`` may be started or not; :meth:`start` starts it. ``shared_lock`` must say whether
    other brokers may share the tables (lease or row lock): that combination is refused.
    The periodic cleanup of a ``pg`` not started yet (``cleanup_interval_s``) is taken over:
    it runs :meth:`cleanup`, which checkpoints before it deletes.
    """

    def __init__(
        self,
        pg: PostgresStore,
        journal_dir: str | os.PathLike[str],
        *,
        sync_policy: str = "always",
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        checkpoint_interval_ms: float = 1000,
        max_pending_bytes: int = 256 * 1024 * 1024,
        journal_max_bytes: int = 1024 * 1024 * 1024,
        archive_dir: str | os.PathLike[str] | None = None,
        broker_name: str | None = None,
        shared_lock: bool,
    ) -> None:
        if shared_lock:
            raise JournalMasterSlaveError(
                "the local journal cannot be used with a shared-database master/slave lock: "
                "until a checkpoint, recent messages and acknowledgements exist only in this "
                "broker's journal, so a standby taking over the lock would see a stale "
                "database (messages missing, consumed messages delivered again). For "
                "master/slave run with --no-journal and the lease lock; for a single broker "
                "with the journal use --lock none."
            )
        self.pg = pg
        self.journal_dir = Path(journal_dir)
        self.sync_policy = sync_policy
        self.segment_size = segment_size
        self.checkpoint_interval_s = checkpoint_interval_ms / 1000.0
        self.max_pending_bytes = max_pending_bytes
        self.journal_max_bytes = journal_max_bytes
        self.archive_dir = Path(archive_dir) if archive_dir is not None else None
        self.broker_name = broker_name
        self.maintenance_interval_s = 0.0 if pg.started else pg.cleanup_interval_s
        if not pg.started:
            pg.cleanup_interval_s = 0  # its thread would clean the database past the window
        self.journal_id = ""
        self._journal: Journal | None = None
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._gate = WriterGate()
        self._state = self._new_state()
        self._inflight: dict[int, int] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._maintenance: threading.Thread | None = None
        self._started = False
        self._counters: dict[str, float] = dict.fromkeys(
            (
                "added",
                "removed",
                "acked",
                "cleaned",
                "written",
                "elided",
                "checkpoints",
                "replayed",
            ),
            0.0,
        )
        #: Acknowledged topic messages checkpoints dropped since the last cleanup() counted
        #: them (taken under ``_checkpointing``).
        self._uncounted_cleaned = 0
        self._ckpt_ms: list[float] = []
        self._last_position = self._applied_end = Position(0, 0)
        self.db = DatabaseView(pg)
        self._admission = Admission(self.db, self._lock, lambda: self._state)
        self._applying: deque[_Applying] = deque()  # written, in log order, not yet applied
        self._unsure = False  # the last checkpoint failed: the database may be ahead of it
        self._checkpointing = threading.Lock()  # one checkpoint at a time, gate taken after it
        #: Subscription changes take turns: each decides on the subscriptions it finds
        #: (exists already; the last one of its topic, so the messages go with it).
        self._subscribing = threading.Lock()
        # While a checkpoint writes its copy of the window: the records applied since, with
        # their apply time, to rebuild the window on top of the database it leaves.
        self._tail: list[tuple[int, list[Op]]] | None = None

    def _new_state(self) -> PendingState:
        return PendingState(keep_history=self.pg.history, keep_bodies=self.pg.history_bodies)

    # ------------------------------------------------------------------ lifecycle
    @property
    def prioritized(self) -> bool:
        return self.pg.prioritized

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
            self._replay()
            with self.pg.transaction() as conn:
                start = self._journal.start_position
                runs.mark_running(conn, self.pg.schema, self.journal_id, start, self._owner)
        except BaseException as exc:
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self.pg.stop()
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
                settle_mode(self.journal_dir, self.prioritized, pending)
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
        return JournalBehindDatabaseError.describe(
            journal_id=self.journal_id,
            directory=self.journal_dir,
            table=self.pg.schema.journal.name,
            stored=stored,
            start=journal.start_position,
            end=journal.position,
            no_record_ends_there=no_record_ends_there,
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

    def _mark_stopped(self) -> None:
        """After the final checkpoint: stamp the journal as stopped cleanly, if nothing of
        it is left unapplied (then a start on another journal loses nothing)."""
        with self._space:
            left = not self._state.empty
        if left:
            return
        with self.pg.transaction() as conn:
            runs.mark_stopped(conn, self.pg.schema, self.journal_id)

    def _check_open(self) -> None:
        if not self._started:
            raise StoreClosedError("the journaled store is not started (call start() first)")

    # ------------------------------------------------------------------ checkpoint
    def _holds_lock(self) -> bool:
        return not self.pg.lock_lost and self.pg.locker.is_held()

    def checkpoint(self) -> CheckpointResult | None:
        """Apply everything acknowledged so far to the database; None if nothing was new.

        Writers are held only while the window is copied and while it is rebuilt after the
        commit, never during the database work: a slow or stalled database holds back
        writers only once the pending window is full.
        """
        with self._checkpointing:
            if self._unsure:
                # Only checkpoints write it; the failed one may still be committing.
                stored = position_after_failure(self.pg, self.journal_id)
                with self._gate.exclusive():
                    self._resync_window(stored)
            with self._gate.exclusive():
                if self._state.empty:
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
                    self._space.notify_all()
                self._last_position = position
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
        if self._unsure:
            self._resync_window(position_after_failure(self.pg, self.journal_id))
        if self._state.empty:
            return None
        position = self._window_end()
        try:
            return self._checkpoint_state(position)
        except BaseException:
            self._unsure = True  # it may have failed after its commit (a lost reply)
            raise

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
                self._space.notify_all()
            self._last_position = stored
            log.warning(
                "journal checkpoint up to %s had been committed although it reported a failure; "
                "the window was rebuilt from the journal after it",
                stored,
            )
        self._unsure = False

    def _checkpoint_state(self, position: Position) -> CheckpointResult:
        result = self._apply(self._state, position)
        self._last_position = position
        with self._space:
            self._state = self._new_state()
            self._space.notify_all()
        return result

    def _apply(self, window: PendingState, position: Position) -> CheckpointResult:
        """Write ``window`` and ``position`` to the database in one transaction."""
        result = apply_checkpoint(
            self.pg,
            window,
            journal_id=self.journal_id,
            position=position,
            broker_name=self.broker_name,
        )
        self._counters["written"] += result.written
        self._counters["elided"] += result.elided
        self._uncounted_cleaned += result.cleaned
        self._counters["checkpoints"] += 1
        self._ckpt_ms = [*self._ckpt_ms[-99:], result.millis]
        return result

    # ------------------------------------------------------------------ write plumbing
    def _admit(self, nbytes: int, wait: bool) -> None:
        """Flow control: producers wait while the un-checkpointed window is full."""
        with self._space:
            while (
                self._started
                and self._state.pending_bytes > 0
                and self._state.pending_bytes + nbytes > self.max_pending_bytes
            ):
                self._wake.set()
                if not wait:
                    raise WouldBlock
                self._space.wait(0.05)

    @contextmanager
    def _writing(self, wait: bool = True) -> Iterator[None]:
        self._check_open()
        with self._gate.shared(wait=wait):
            self._check_open()
            self.pg.check_writable()  # lock held (LockLostError otherwise)
            yield

    def _append(self, ops: list[Op]) -> int:
        """Journal one record (durable on return), then apply it; returns rows it removed.

        Records are applied in log order, as replay applies them: each joins the line when
        it is written, and whoever returns first applies every record ahead of its own
        (acknowledged too, since the log is durable up to its own).
        """
        entry = _Applying(ops)
        try:
            end = self.journal.append(ops, on_written=lambda: self._applying.append(entry))
        except JournalError as exc:
            raise JournalWriteError(str(exc)) from exc
        with self._lock:
            self._applied_end = max(self._applied_end, end)
            while entry.removed is None:
                head = self._applying.popleft()
                now = int(time.time() * 1000)
                head.removed = self._state.apply(head.ops, now)
                if self._tail is not None:
                    self._tail.append((now, head.ops))
            removed = entry.removed
            pending = self._state.pending_bytes
        full = self.journal.bytes_on_disk >= self.journal_max_bytes
        if full or pending * 2 >= self.max_pending_bytes:
            self._wake.set()
        return removed

    def _assign(self, count: int) -> list[int]:
        with self._lock:
            ids = self.pg.next_ids(count)
            self._inflight[ids[0]] = count
        return ids

    def _write(
        self,
        adds: Sequence[NewMessage],
        removes: Sequence[Removal],
        acks: Sequence[Ack],
        *,
        wait: bool = True,
    ) -> tuple[list[int], int]:
        check_work(adds, removes, acks, self.pg.max_message_bytes)
        if adds:
            self._admit(sum(len(m.msg) for m in adds) + 200 * len(adds), wait)
        with self._writing(wait):
            ids: list[int] = []
            keys: list[Key] = []
            claimed: Claims = {}
            try:
                keys = self._admission.reserve(adds, wait=wait) if adds else []
                claimed = self._admission.claim(removes, wait=wait) if removes else {}
                # IDs only once admitted: a refused or declined write takes none
                ids = self._assign(len(adds)) if adds else []
                col = self.pg.column_priority
                ops: list[Op] = [
                    AddMessage(
                        i,
                        m.container,
                        m.msgid_prod,
                        m.msgid_seq,
                        m.expiration,
                        col(m.priority),
                        bytes(m.msg),
                    )
                    for m, i in zip(adds, ids, strict=True)
                ]
                ops += [
                    RemoveMessages(encode_target(c, o, Outcome.ACKNOWLEDGED), tuple(r))
                    for (c, o), r in claimed.items()
                ]
                ops += [
                    AckSubscription(
                        a.key.container,
                        a.key.client_id,
                        a.key.sub_name,
                        a.message_id,
                        col(a.priority),
                    )
                    for a in acks
                ]
                removed = self._append(ops) if ops else 0
            finally:
                if ids:
                    with self._lock:
                        self._inflight.pop(ids[0], None)
                self._admission.release(keys, claimed)
        self._counters["added"] += len(ids)
        self._counters["removed"] += removed
        self._counters["acked"] += len(acks)
        return ids, removed

    # ------------------------------------------------------------------ messages
    def new_producers(self, prefix: str) -> None:
        self._admission.new_producers(prefix)

    def add(self, messages: Sequence[NewMessage]) -> list[int]:
        return self._write(messages, (), ())[0]

    def remove(
        self, container: str, ids: Sequence[int], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> int:
        check_container(container)
        return self._write((), [Removal(container, i, outcome) for i in ids], ())[1]

    def commit(self, batch: Batch) -> list[int]:
        return self._write(batch.adds, batch.removes, batch.acks)[0]

    def try_commit(self, batch: Batch) -> list[int] | None:
        """:meth:`commit` if it can go ahead without waiting, else None and nothing written.

        It still waits for its own journal record to be durable (one fsync), but never for a
        checkpoint, for room in the pending window or for the database (a duplicate check or
        a removal of a checkpointed message): an event loop may call it in place of handing
        the batch to a thread, and hand it over only when it returns None.
        """
        try:
            return self._write(batch.adds, batch.removes, batch.acks, wait=False)[0]
        except WouldBlock:
            return None

    def update(self, container: str, message_id: int, msg: bytes) -> None:
        check_container(container)
        check_body(msg, self.pg.max_message_bytes)
        with self._writing():
            with self._lock:
                state = self._state
                mem = state.adds.get(message_id)
                hidden = state.hides(message_id, container)
            stored = (
                mem.container == container
                if mem is not None
                else not hidden and self.db.exists(message_id, container)
            )
            if not stored:
                raise MessageNotFoundError(f"message {message_id} is not stored in {container}")
            self._append([UpdateMessage(container, message_id, bytes(msg))])

    def purge(self, container: str) -> int:
        check_container(container)
        return self._purge(container, Outcome.PURGED, [])

    def _purge(
        self, container: str, outcome: Outcome, extra: list[Op], counter: str = "removed"
    ) -> int:
        """Remove every message of ``container`` (journaling ``extra`` first, in the same
        record), counted in ``counter``; returns how many there were."""
        with self._writing():
            before = self.count(container)
            self._append(
                [*extra, PurgeDestination(encode_target(container, outcome, Outcome.PURGED))]
            )
        self._counters[counter] += before
        return before

    # ------------------------------------------------------------------ durable topics
    def add_subscription(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None = None,
        sub_dest: str | None = None,
        retroactive: bool = False,
    ) -> Subscription:
        check_subscription(key, selector, sub_dest)
        with self._subscribing:
            existing = self.get_subscription(key)
            if existing is not None:
                return existing
            with self._writing():
                with self._lock:  # the newest message: an ack's higher ID is no message
                    mem_top = self._state.max_message_id
                start = -1 if retroactive else max(self.db.max_id(), mem_top)
                self._append(
                    [
                        AddSubscription(
                            key.container,
                            key.client_id,
                            key.sub_name,
                            selector,
                            sub_dest or key.container,
                            start,
                            self.prioritized,
                        )
                    ]
                )
        return Subscription(key, selector, sub_dest or key.container, start)

    def delete_subscription(self, key: SubscriptionKey) -> None:
        check_topic(key.container)  # no subscription left on a queue is no topic to purge
        op = DeleteSubscription(key.container, key.client_id, key.sub_name)
        with self._subscribing:
            others = [s for s in self.subscriptions(key.container) if s.key != key]
            if others:
                with self._writing():
                    self._append([op])
            else:  # the last subscription gone: its topic's messages are needed by nobody
                self._purge(key.container, Outcome.ACKNOWLEDGED, [op], counter="cleaned")

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        self._write((), (), acks)

    # ------------------------------------------------------------------ XA (write-through)
    def _through(self, fn: Callable[[], T]) -> T:
        """Checkpoint, then run database work with every writer held off."""
        self._check_open()
        with self._checkpointing, self._gate.exclusive():
            self._checkpoint_locked()
            return fn()

    def xa_prepare(self, xid: Xid, batch: Batch) -> list[int]:
        check_batch(batch, self.pg.max_message_bytes)

        def prepare() -> list[int]:
            ids = self.pg.xa_prepare(xid, batch)
            self._admission.stored_elsewhere(batch.adds)
            return ids

        return self._through(prepare)

    def xa_commit(self, xid: Xid) -> None:
        self._through(lambda: self.pg.xa_commit(xid))

    def xa_rollback(self, xid: Xid) -> None:
        self._through(lambda: self.pg.xa_rollback(xid))

    def xa_recover(self) -> list[PreparedTransaction]:
        """The database's prepared transactions, their rows with the bodies the window
        rewrote (an update reaches prepared rows too), as reads show them."""
        with self._lock:  # before the read: a checkpoint meanwhile wrote them to its rows
            updates = {i: body for i, (_c, body) in self._state.updates.items()}
        found = self.pg.xa_recover()
        if not updates:
            return found

        def rewritten(rows: tuple[StoredMessage, ...]) -> tuple[StoredMessage, ...]:
            return tuple(replace(m, msg=updates[m.id]) if m.id in updates else m for m in rows)

        return [replace(t, adds=rewritten(t.adds), removes=rewritten(t.removes)) for t in found]

    # ------------------------------------------------------------------ maintenance
    def cleanup(self) -> int:
        """Checkpoint (eliding acknowledged topic messages), then clean the database.

        Returns how many topic messages every subscription acknowledged were removed since
        the last call: those checkpoints dropped from the window (never written) plus the
        rows deleted now, so the calls add up to what the plain store's cleanups delete.

        Writers are not held: only a new subscription waits, for one database batch at
        most. Every batch deletes with each subscription in the database: the first follows
        a checkpoint, and so does a later one if a subscription was created in the meantime
        (a retroactive one is owed what the others acknowledged).
        """
        self._check_open()
        total, checkpoint, more = 0, True, True
        while more and not self._stopping.is_set():
            with self._subscribing:
                if checkpoint or self._state.subs_added:
                    self.checkpoint()
                    checkpoint = False
                deleted, more = self.pg.clean_batch()
            with self._checkpointing:
                counted = self._uncounted_cleaned + deleted
                self._uncounted_cleaned = 0
            self._counters["cleaned"] += counted
            total += counted
        return total

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        with self._lock:
            state = self._state
            mem = [m for m in state.adds.values() if 0 < m.expiration < now_ms]
            # In-flight adds may be rows already: they are read from memory only.
            removed = list(state.removed) + state.in_flight_live()
            purged = list(state.purged)
            # database rows carry the bodies the window rewrote, as reads do
            updates = {i: body for i, (_c, body) in state.updates.items()}
        db, cut = self._expired_in_database(now_ms, limit, removed, purged, max_bytes, updates)
        db = [replace(m, msg=updates[m.id]) if m.id in updates else m for m in db]
        rows = sorted(mem + db, key=lambda m: (m.expiration, m.id))
        if cut and db:  # a database row left out may sort before a later memory add
            last = (db[-1].expiration, db[-1].id)
            rows = [m for m in rows if (m.expiration, m.id) <= last]
        rows = within_bytes(rows[:limit], max_bytes)
        if remove and rows:
            self._write((), [Removal(m.container, m.id, Outcome.EXPIRED) for m in rows], ())
        return rows
