"""The journaled store: the store port with a local write-ahead journal in front of PostgreSQL.

Writes are acknowledged once their journal record is durable (group commit) and applied to
an in-memory :class:`~journal.state.PendingState`; reads merge that state with the database;
a checkpoint thread applies the net effect to the database in one transaction together with
the journal position (see :mod:`journal.checkpoint`). XA work and topic cleanup first
checkpoint, then run on the database directly while writers are held.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from journal.admission import Admission
from journal.checkpoint import CheckpointResult, apply_checkpoint
from journal.format import Position
from journal.lifecycle import Lifecycle
from journal.merge import DatabaseView
from journal.records import (
    AddSubscription,
    DeleteSubscription,
    Op,
    PurgeDestination,
    UpdateMessage,
)
from journal.state import PendingState, encode_target
from journal.support import (
    JournalBehindDatabaseError,
    JournalDatabaseMismatchError,
    JournalIdLostError,
    JournalMasterSlaveError,
    JournalModeMismatchError,
    JournalRowMissingError,
    JournalUnusableError,
    WouldBlock,
    WriterGate,
)
from journal.writer import DEFAULT_SEGMENT_SIZE, Journal
from journal.writes import JournaledWrites, JournalWriteError
from mqstore.errors import MessageNotFoundError
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
)

__all__ = [
    "JournalBehindDatabaseError",
    "JournalDatabaseMismatchError",
    "JournalIdLostError",
    "JournalMasterSlaveError",
    "JournalModeMismatchError",
    "JournalRowMissingError",
    "JournalUnusableError",
    "JournalWriteError",
    "JournaledStore",
]

T = TypeVar("T")


class JournaledStore(Lifecycle, JournaledWrites):
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
        #: Checkpoints applied and their milliseconds added up, replaced together (one read
        #: sees a count and a sum that agree).
        self._ckpt_total: tuple[int, float] = (0, 0.0)
        self._ckpt_failures = 0
        self._ckpt_succeeded_at = 0.0
        self._last_position = self._applied_end = Position(0, 0)
        self.db = DatabaseView(pg)
        self._admission = Admission(self.db, self._lock, lambda: self._state)
        self._applying = deque()  # written, in log order, not yet applied
        self._unsure = False  # the last checkpoint failed: the database may be ahead of it
        self._checkpointing = threading.Lock()  # one checkpoint at a time, gate taken after it
        #: Subscription changes take turns: each decides on the subscriptions it finds
        #: (exists already; the last one of its topic, so the messages go with it).
        self._subscribing = threading.Lock()
        # While a checkpoint writes its copy of the window: the records applied since, with
        # their apply time, to rebuild the window on top of the database it leaves.
        self._tail: list[tuple[int, list[Op]]] | None = None

    @property
    def prioritized(self) -> bool:
        return self.pg.prioritized

    # ------------------------------------------------------------------ checkpoint
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
        count, millis = self._ckpt_total
        self._ckpt_total = (count + 1, millis + result.millis)
        return result

    def checkpoint_figures(self) -> dict[str, float]:
        """Figures of checkpoints and the journal for monitoring, read without waiting for a
        checkpoint, a journal sync or the database: checkpoints applied (``checkpoints``)
        and their milliseconds added up (``checkpoint_ms``), the last one's
        (``last_checkpoint_ms``); checkpoints that failed (``checkpoint_failures``) and when
        one last succeeded, applying the window or finding it empty
        (``last_checkpoint_success``, seconds since the epoch; 0: none yet); the bytes the
        pending window holds for the next checkpoint (``pending_bytes``; writers wait at
        ``max_pending_bytes``); the journal's ``segments`` and ``journal_bytes`` on disk,
        and ``journal_failed`` (1: every write is refused until a restart).
        """
        count, millis = self._ckpt_total
        recent = self._ckpt_ms
        succeeded_at = self._ckpt_succeeded_at
        with self._lock:
            pending = self._state.pending_bytes
            failures = self._ckpt_failures
        journal = self._journal
        jstats = journal.stats() if journal is not None else None
        return {
            "checkpoints": float(count),
            "checkpoint_ms": millis,
            "last_checkpoint_ms": recent[-1] if recent else 0.0,
            "checkpoint_failures": float(failures),
            "last_checkpoint_success": succeeded_at,
            "pending_bytes": float(pending),
            "max_pending_bytes": float(self.max_pending_bytes),
            "segments": float(jstats.segments if jstats is not None else 0),
            "journal_bytes": float(jstats.bytes_on_disk if jstats is not None else 0),
            "journal_failed": float(journal is not None and journal.failed),
        }

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
            try:
                return fn()
            finally:
                with self._lock:  # it may have taken rows out of the database, or hidden them
                    self._admission.forget_locked()

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
        generation = self._admission.generation()
        with self._lock:
            state = self._state
            mem = [m for m in state.adds.values() if 0 < m.expiration < now_ms]
            # In-flight adds may be rows already: they are read from memory only.
            removed = list(state.removed) + state.in_flight_live()
            purged = list(state.purged)
            # database rows carry the bodies the window rewrote, as reads do
            updates = {i: body for i, (_c, body) in state.updates.items()}
        db, cut = self._expired_in_database(now_ms, limit, removed, purged, max_bytes, updates)
        self._admission.seen_in_database(db, generation)
        db = [replace(m, msg=updates[m.id]) if m.id in updates else m for m in db]
        rows = sorted(mem + db, key=lambda m: (m.expiration, m.id))
        if cut and db:  # a database row left out may sort before a later memory add
            last = (db[-1].expiration, db[-1].id)
            rows = [m for m in rows if (m.expiration, m.id) <= last]
        rows = within_bytes(rows[:limit], max_bytes)
        if remove and rows:
            self._write((), [Removal(m.container, m.id, Outcome.EXPIRED) for m in rows], ())
        return rows
