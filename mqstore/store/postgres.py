"""The PostgreSQL store: ActiveMQ's JDBC row semantics on SQLAlchemy Core and psycopg 3."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from mqstore import migrate
from mqstore.db import (
    LOCK_NOT_AVAILABLE,
    ByteaArray,
    check_connection,
    describe_connect_error,
    sqlstate,
)
from mqstore.errors import (
    ConfigError,
    DatabaseUnavailableError,
    DuplicateMessageError,
    InvalidMessageError,
    LeaseNotRenewedError,
    LockLostError,
    MessageNotFoundError,
    StoreClosedError,
    StoreError,
)
from mqstore.lock import Locker, NoLocker, Renewal
from mqstore.schema import MAX_BODY_BYTES
from mqstore.statements import CommitShape, Rows, commit_batch, statements_for
from mqstore.store.commit_connections import CommitConnections
from mqstore.store.history import TrimBound, trim_history
from mqstore.store.model import (
    EXPIRE_MAX_BYTES,
    FIRST,
    NO_BOUND,
    NO_BYTE_BOUND,
    Ack,
    Batch,
    Cursor,
    NewMessage,
    Outcome,
    PreparedTransaction,
    Removal,
    StoredMessage,
    StoreStats,
    Subscription,
    SubscriptionKey,
    Xid,
)
from mqstore.store.topics import TopicOperations
from mqstore.store.validation import (
    LONG_MAX,
    check_acks,
    check_batch,
    check_body,
    check_container,
)
from mqstore.store.xa import XaOperations

log = logging.getLogger(__name__)
T = TypeVar("T")

#: SQLSTATE of a unique (or primary key) violation.
UNIQUE_VIOLATION = "23505"


#: Bytes of message bodies one statement carries at most. PostgreSQL refuses a protocol
#: message (and an array value) of 1 GiB or more, and ends the connection; larger work
#: goes in several statements of one transaction.
STATEMENT_BYTES = 256 * 1024 * 1024


def _refused_value(exc: DataError | UnicodeEncodeError, done: str) -> InvalidMessageError:
    """The store error for a value PostgreSQL cannot take (a NUL character, a lone
    surrogate, an integer past BIGINT) in a call that does not check every value first."""
    if isinstance(exc, UnicodeEncodeError):
        detail = f"{exc.reason} in {exc.object[:40]!r}, which UTF-8 cannot encode"
    else:
        detail = (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]
    return InvalidMessageError(
        f"PostgreSQL cannot take a value of this call ({detail}): correct the value; {done}"
    )


def _pool_exhausted(engine: Engine, done: str) -> DatabaseUnavailableError:
    """The store error for a call that waited the pool's timeout for a connection."""
    pool = engine.pool
    timeout = pool.timeout() if isinstance(pool, sa.QueuePool) else "its"
    return DatabaseUnavailableError(
        f"no database connection of the engine's pool came free in {timeout} s: every one is "
        "in use (a slow database, or more threads than connections); size the pool for the "
        f"threads calling the store, plus the store's own (docs/store-api.md); {done}"
    )


@contextmanager
def _driver_refusals(engine: Engine, done: str, pool_done: str | None = None) -> Iterator[None]:
    """A value PostgreSQL refuses, and a pool with no connection free, as store errors
    saying ``done`` (``pool_done`` for the pool, when it differs)."""
    try:
        yield
    except (DataError, UnicodeEncodeError) as exc:
        raise _refused_value(exc, done) from None
    except PoolTimeoutError:
        raise _pool_exhausted(engine, pool_done or done) from None


def _now_ms() -> int:
    return int(time.time() * 1000)


class PostgresStore:
    """The store port on PostgreSQL (see :class:`mqstore.store.port.Store`).

    Only the lock holder writes: :meth:`start` blocks until ``locker`` is held, and every
    write checks it first. IDs come from an in-memory sequence resumed, as ActiveMQ does,
    from max(MAX(ID), MAX(LAST_ACKED_ID)).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        prefix: str = "",
        locker: Locker | None = None,
        prioritized: bool = False,
        history: bool = True,
        history_bodies: bool = False,
        history_retention_days: float = 0.0,
        max_message_bytes: int = 100 * 1024 * 1024,
        cleanup_interval_s: float = 60.0,
        cleanup_batch: int = 1000,
        on_lock_lost: Callable[[], None] | None = None,
    ) -> None:
        if max_message_bytes > MAX_BODY_BYTES:
            raise ConfigError(
                f"max_message_bytes {max_message_bytes} is more than PostgreSQL can hand back "
                f"in one value (it reads BYTEA hex-encoded, under 1 GiB): set at most "
                f"{MAX_BODY_BYTES} (511 MiB)"
            )
        self.engine = engine
        self.prefix = prefix
        self.sql = statements_for(prefix, prioritized)
        self.schema = self.sql.schema
        self.locker: Locker = locker or NoLocker()
        self._prioritized = prioritized
        self.history, self.history_bodies = history, history_bodies
        self.history_retention_days = history_retention_days
        self.max_message_bytes = max_message_bytes
        self.cleanup_interval_s, self.cleanup_batch = cleanup_interval_s, cleanup_batch
        self.on_lock_lost = on_lock_lost
        self._seq_lock = threading.Lock()
        self._last_id = 0
        self._inflight: dict[int, int] = {}  # first ID of an uncommitted add batch -> count
        self._started = False
        self._lock_lost = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counters: dict[str, float] = {"added": 0, "removed": 0, "acked": 0, "cleaned": 0}
        self._commits = CommitConnections(engine)
        self._commit_sql: dict[CommitShape, str] = {}
        self.xa = XaOperations(self)
        self.topics = TopicOperations(self)

    # ------------------------------------------------------------------ lifecycle
    @property
    def prioritized(self) -> bool:
        return self._prioritized

    @property
    def started(self) -> bool:
        return self._started

    @property
    def lock_lost(self) -> bool:
        """Deposed: the keeper found the lock taken (or ended); this store never writes again."""
        return self._lock_lost

    def start(self, stop: threading.Event | None = None) -> None:
        """Check the database, wait for the master lock, resume the ID sequence."""
        check_connection(self.engine)
        with self.engine.connect() as conn:
            migrate.require_head(conn, self.prefix)
        if not self.locker.acquire(stop or self._stopping):
            raise StoreClosedError("store start was cancelled while waiting for the lock")
        with self.engine.connect() as conn:
            self._last_id = int(conn.execute(self.sql.last_sequence).scalar_one())
        self._stopping.clear()
        self._commits.reopen()
        self._lock_lost = False
        self._started = True
        keeper = threading.Thread(target=self._keep_lock, name="mqstore-lock-keeper", daemon=True)
        keeper.start()
        self._threads.append(keeper)
        if self.cleanup_interval_s > 0:
            self._spawn("mqstore-cleanup", self._periodic_cleanup, self.cleanup_interval_s)
        log.info("store started (prefix %r, last ID %d)", self.prefix, self._last_id)

    def stop(self) -> None:
        """Stop background work, release the lock. Idempotent."""
        if not self._started:
            return
        self._started = False
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._threads.clear()
        self._commits.close()
        self.locker.release()

    def _spawn(self, name: str, fn: Callable[[], None], every_s: float) -> None:
        def loop() -> None:
            while not self._stopping.wait(every_s):
                try:
                    fn()
                except Exception:  # a background task must outlive one failed run
                    log.exception("%s failed; retrying in %.1f s", name, every_s)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _keep_lock(self) -> None:
        """Renew the lock every ``renew_interval_s`` until the store stops or is deposed.

        A renewal the database did not answer is retried every second or so: the lease stays
        ours until its local deadline, writes are then refused (``check_writable``), and the
        first renewal that gets through resumes them if no other broker took the lease. Only
        a lock another broker holds (or that ended) deposes the store: found by a renewal,
        or within a second by a write's fence. Its background work then stops, writes are
        refused for good and ``on_lock_lost`` is called, once.
        """
        renew_s = self.locker.renew_interval_s
        tick_s = min(1.0, renew_s)
        due = time.monotonic() + renew_s
        while not self._stopping.wait(max(0.0, min(tick_s, due - time.monotonic()))):
            if self.locker.lost_reason:
                break  # a write's fence found the lock taken
            if time.monotonic() < due:
                continue
            started = time.monotonic()
            try:
                outcome = self.locker.renew()
            except Exception:  # the keeper must outlive one failed renewal
                log.exception("lock renewal failed; retrying in %.1f s", tick_s)
                outcome = Renewal.UNREACHABLE
            if outcome is Renewal.LOST:
                break
            due = started + (renew_s if outcome is Renewal.KEPT else tick_s)
        else:
            return
        self._lock_lost = True
        log.error(
            "no longer master: %s; this store stopped writing",
            self.locker.lost_reason or f"the lock {self.schema.lock.name} was lost",
        )
        self._stopping.set()
        if self.on_lock_lost is not None:
            self.on_lock_lost()

    def _periodic_cleanup(self) -> None:
        self.maintain(self.cleanup)

    def maintain(self, cleanup: Callable[[], int]) -> None:
        """One run of the periodic maintenance, on the master only: ``cleanup`` (this
        store's :meth:`cleanup`, or that of a store in front of it) and the history trim.
        Failures are logged; the next run retries."""
        try:
            if self.locker.is_held():
                cleanup()
        except Exception:  # keep the timer alive; the next run retries
            log.exception("topic cleanup failed")
        try:
            if self.history_retention_days > 0 and self.locker.is_held():
                self.trim_old_history()
        except Exception:
            log.exception("history trim failed")

    def trim_old_history(self) -> int:
        """Delete history rows older than ``history_retention_days``; returns how many."""
        bound = TrimBound.older_than(self.history_retention_days)
        trimmed = trim_history(
            self.engine, self.prefix, bound, batch=self.cleanup_batch, stop=self._stopping
        )
        if trimmed:
            log.info(
                "trimmed %d history row(s) older than %g day(s)",
                trimmed,
                self.history_retention_days,
            )
        return trimmed

    # ------------------------------------------------------------------ plumbing
    def check_writable(self) -> None:
        """Raise unless started and holding the master lock."""
        if not self._started:
            raise StoreClosedError("the store is not started (call start() first)")
        if not self.locker.is_held():
            lost = self.locker.lost_reason
            if lost or self._lock_lost:
                raise LockLostError(
                    f"this store no longer holds the master lock on {self.schema.lock.name}"
                    f"{f' ({lost})' if lost else ''}; it stopped writing. Restart it to wait "
                    "as a slave."
                )
            raise LeaseNotRenewedError(
                f"this store cannot renew its lease on {self.schema.lock.name}: the database "
                "did not answer before the lease ran out, so writes are refused until a "
                "renewal gets through (it keeps the lease if no other broker took it)"
            )

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A fenced write transaction; database failures become store errors (a connection
        lost while its COMMIT was under way leaves the outcome unknown, and says so)."""
        self.check_writable()
        committing = False
        try:
            with (
                _driver_refusals(self.engine, "nothing of this operation was committed"),
                self.engine.begin() as conn,
            ):
                self.locker.fence(conn)
                yield conn
                # The lease may have run out (and been taken) while this transaction ran:
                # then roll back rather than commit beside the new master.
                self.check_writable()
                committing = True
        except IntegrityError as exc:
            mapped = self._write_failed(exc)
            if mapped is exc:
                raise
            raise mapped from None
        except OperationalError as exc:
            unknown = committing and exc.connection_invalidated
            raise DatabaseUnavailableError(
                describe_connect_error(exc, self.engine.url)
                + (
                    "; the connection ended during the COMMIT: this operation may or may not "
                    "have been committed"
                    if unknown
                    else "; nothing of this operation was committed"
                )
            ) from None

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` on a pooled connection; a lost database, or a value PostgreSQL cannot
        take, becomes a store error."""
        try:
            with (
                _driver_refusals(self.engine, "nothing was read", "run it again"),
                self.engine.connect() as conn,
            ):
                return fn(conn)
        except OperationalError as exc:
            raise DatabaseUnavailableError(describe_connect_error(exc, self.engine.url)) from None

    def next_ids(self, count: int) -> list[int]:
        """Reserve ``count`` strictly increasing IDs."""
        with self._seq_lock:
            first = self._take_ids_locked(count)
        return list(range(first, first + count))

    def _take_ids_locked(self, count: int) -> int:
        """The first of ``count`` new IDs (the caller holds the sequence lock)."""
        if count > LONG_MAX - self._last_id:
            raise StoreError(
                f"the message IDs are used up: the highest ID stored is {self._last_id} and "
                f"{count} more would pass {LONG_MAX}, the largest BIGINT; a row another "
                "program wrote with such an ID (or LAST_ACKED_ID) is the usual cause: find "
                f"it with SELECT max(id) FROM {self.schema.msgs.name} and SELECT "
                f"max(last_acked_id) FROM {self.schema.acks.name}, and lower it while no "
                "broker runs; nothing was written"
            )
        first = self._last_id + 1
        self._last_id += count
        return first

    @contextmanager
    def reserve_ids(self, count: int) -> Iterator[list[int]]:
        """Reserve ``count`` IDs for rows being committed: until the block ends, pages do
        not read past the first of them (reserving and marking happen at once, so a page
        never sees a later ID commit while an earlier one is still to come)."""
        if not count:
            yield []
            return
        with self._seq_lock:
            first = self._take_ids_locked(count)
            self._inflight[first] = count
        try:
            yield list(range(first, first + count))
        finally:
            with self._seq_lock:
                self._inflight.pop(first, None)

    def stats_last_id(self) -> int:
        """The last ID handed out."""
        return self._last_id

    def advance_sequence(self, min_last_id: int) -> None:
        """Make the next ID larger than ``min_last_id`` (e.g. IDs found in a journal)."""
        with self._seq_lock:
            self._last_id = max(self._last_id, min_last_id)

    def bound(self) -> int:
        """Pages never read past the lowest uncommitted ID (IDs may commit out of order).

        Nor past the next ID to be handed out: a page's query reads the table a moment
        after it takes this bound, and IDs reserved in between may commit out of order
        before it does. A store that is not writing (stopped, deposed) bounds nothing.
        """
        with self._seq_lock:
            writing = self._started and not self._lock_lost
            next_id = self._last_id + 1 if writing else NO_BOUND
            return min(min(self._inflight, default=NO_BOUND), next_id)

    def column_priority(self, jms_priority: int) -> int:
        """The PRIORITY column value: the real priority only in prioritized mode."""
        return jms_priority if self._prioritized else 0

    def rows_for(
        self, messages: Sequence[NewMessage], ids: Sequence[int], xid: str | None
    ) -> list[dict[str, object]]:
        """INSERT parameters for new messages with their assigned IDs."""
        return [
            {
                "id": i,
                "container": m.container,
                "msgid_prod": m.msgid_prod,
                "msgid_seq": m.msgid_seq,
                "expiration": m.expiration,
                "priority": self.column_priority(m.priority),
                "msg": bytes(m.msg),
                "xid": xid,
            }
            for m, i in zip(messages, ids, strict=True)
        ]

    def insert_rows(self, conn: Connection, rows: list[dict[str, object]]) -> None:
        """Insert rows, one statement per :data:`STATEMENT_BYTES` of bodies (one round trip
        but for huge batches); a duplicate JMS id becomes DuplicateMessageError."""
        # Statements over arrays: far less server work than a statement per row.
        try:
            for chunk in _byte_chunks(rows):
                conn.execute(self.sql.insert_msgs, _insert_params(chunk))
        except IntegrityError as exc:
            raise self._duplicate(exc) from None

    @staticmethod
    def _duplicate(exc: IntegrityError) -> Exception:
        """The store error for a failed INSERT: a duplicate JMS message id, or ``exc`` itself."""
        if "_uidx" in str(exc.orig):
            return DuplicateMessageError(
                "a message with the same JMS message id is already stored in that "
                f"destination ({str(exc.orig).splitlines()[-1].strip()}); nothing was added"
            )
        return exc

    def _write_failed(self, exc: IntegrityError) -> Exception:
        """:meth:`_duplicate`, or for a message ID already stored :meth:`_id_taken`. Called
        once the write's connection is given back (the latter reads the table)."""
        mapped = self._duplicate(exc)
        table = getattr(getattr(exc.orig, "diag", None), "table_name", None)
        if mapped is exc and sqlstate(exc) == UNIQUE_VIOLATION and table == self.schema.msgs.name:
            return self._id_taken(exc)  # the primary key: MSGS has no other unique index
        return mapped

    def _id_taken(self, exc: IntegrityError) -> StoreError:
        """The store error for a message ID already stored: another writer stored rows under
        IDs this store hands out. The sequence resumes after the table's highest ID (as at
        start), so the next write does not meet the same rows."""
        try:
            with self.engine.connect() as conn:
                self.advance_sequence(int(conn.execute(self.sql.last_sequence).scalar_one()))
        except Exception:  # the error below matters more than the resync
            log.warning("could not resume the ID sequence after the table", exc_info=True)
        detail = (str(exc.orig).strip().splitlines() or [""])[-1].strip()
        return StoreError(
            f"a message ID this store handed out is already stored in {self.schema.msgs.name} "
            f"({detail}): another broker or program writes these tables beside this one (only "
            "the master may write: check that every broker on them uses the same lock); "
            "nothing was written"
        )

    def delete_rows(
        self, conn: Connection, removals: Sequence[Removal], default: Outcome = Outcome.ACKNOWLEDGED
    ) -> int:
        """Delete visible rows by (container, id), recording history; returns rows deleted."""
        if not removals:
            return 0
        params = _removal_params(removals, default)
        if self.history:
            stmt = self.sql.delete_msgs_with_history
            params.update(now=_now_ms(), keep_body=self.history_bodies)
            return int(conn.execute(stmt, params).rowcount)
        return int(conn.execute(self.sql.delete_msgs, params).scalar_one())

    def _newest_acks(self, acks: Sequence[Ack]) -> dict[tuple[SubscriptionKey, int], int]:
        """The newest acknowledged ID per (subscription, PRIORITY column value)."""
        newest: dict[tuple[SubscriptionKey, int], int] = {}
        for ack in acks:
            slot = (ack.key, self.column_priority(ack.priority))
            newest[slot] = max(newest.get(slot, -1), ack.message_id)
        return newest

    def apply_acks(self, conn: Connection, acks: Sequence[Ack]) -> None:
        """Advance LAST_ACKED_ID, reduced to the newest ack per subscription and priority."""
        newest = self._newest_acks(acks)
        if newest:
            conn.execute(self.sql.ack_subscription, _ack_params(newest))

    # ------------------------------------------------------------------ messages
    def new_producers(self, prefix: str) -> None:
        """Nothing to do: each add is checked by the unique index as it is written."""

    def add(self, messages: Sequence[NewMessage]) -> list[int]:
        return self.commit(Batch(adds=list(messages)))

    def remove(
        self, container: str, ids: Sequence[int], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> int:
        check_container(container)
        count = self._write_batch(Batch(removes=[Removal(container, i, outcome) for i in ids]), [])
        self._counters["removed"] += count
        return count

    def commit(self, batch: Batch) -> list[int]:
        body_bytes = check_batch(batch, self.max_message_bytes)
        with self.reserve_ids(len(batch.adds)) as ids:
            if body_bytes > STATEMENT_BYTES:
                removed = self._write_in_transaction(batch, ids)
            else:
                removed = self._write_batch(batch, ids)
        self._counters["added"] += len(ids)
        self._counters["removed"] += removed
        self._counters["acked"] += len(batch.acks)
        return ids

    def _write_batch(self, batch: Batch, ids: Sequence[int]) -> int:
        """Commit ``batch`` (adds under ``ids``) in one autocommitted statement, one round trip
        where a transaction would take four; returns the rows removed.

        Fenced as :meth:`transaction` is: the statement reads the lock row FOR SHARE and
        writes nothing unless this store still holds it.
        """
        self.check_writable()
        if not batch:
            return 0
        holder, session = self.locker.fence_holder, self.locker.fence_session
        adds, removes = batch.adds, batch.removes
        newest = self._newest_acks(batch.acks)
        fenced = holder is not None
        shape = CommitShape(
            fenced,
            self.history,
            Rows.of(len(adds)),
            Rows.of(len(removes)),
            Rows.of(len(newest)),
            session_fence=session is not None,
            prioritized=self._prioritized,
        )
        params: dict[str, object] = {"holder": holder}
        if session is not None:
            params["lock_xact"] = session
        if adds:
            params.update(_bind(shape.adds, _insert_params(self.rows_for(adds, ids, None))))
        if removes:
            removal = _removal_params(removes, Outcome.ACKNOWLEDGED, "rm_")
            params.update(_bind(shape.removes, removal))
            if self.history:
                params.update(now=_now_ms(), keep_body=self.history_bodies)
        if newest:
            params.update(_bind(shape.acks, _ack_params(newest, "ack_")))
        try:
            with _driver_refusals(self.engine, "nothing of the batch was written"):
                row = self._commits.run(self._commit_statement(shape), params)
        except IntegrityError as exc:
            raise self._write_failed(exc) from None
        except OperationalError as exc:
            if session is not None and sqlstate(exc) == LOCK_NOT_AVAILABLE:
                # The lock row's NOWAIT failed (or a lock_timeout set in the DSN ran out):
                # LockLostError when another broker holds the row.
                with self.engine.connect() as conn:
                    self.locker.fence(conn)
            # The server's refusal (a statement_timeout, a lock_timeout) rolled the statement
            # back; only a connection that ended leaves the outcome unknown.
            unknown = exc.connection_invalidated or sqlstate(exc) is None
            raise DatabaseUnavailableError(
                describe_connect_error(exc, self.engine.url)
                + (
                    "; the batch may or may not have been committed"
                    if unknown
                    else "; nothing of the batch was written"
                )
            ) from None
        found, removed = cast(tuple[str | None, int], row)
        if fenced:
            self.locker.check_fence(found)
        return int(removed)

    def _write_in_transaction(self, batch: Batch, ids: Sequence[int]) -> int:
        """Commit ``batch`` (adds under ``ids``) in one transaction of several statements: a
        batch whose bodies one statement cannot carry. Returns the rows removed."""
        with self.transaction() as conn:
            self.insert_rows(conn, self.rows_for(batch.adds, ids, None))
            removed = self.delete_rows(conn, batch.removes)
            self.apply_acks(conn, batch.acks)
        return removed

    def _commit_statement(self, shape: CommitShape) -> str:
        """The commit statement of ``shape``, compiled once for the driver."""
        sql = self._commit_sql.get(shape)
        if sql is None:
            stmt = commit_batch(self.prefix, shape)
            sql = self._commit_sql[shape] = str(stmt.compile(dialect=self.engine.dialect))
        return sql

    def page(
        self, container: str, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        cursor = after or FIRST
        params = {
            "container": container,
            "bound": self.bound(),
            "neg_priority": -cursor.priority,
            "after_id": cursor.id,
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if max_bytes is None else max_bytes,
        }
        rows = self.read(lambda c: c.execute(self.sql.page_queue, params).all())
        return [StoredMessage.from_row(r) for r in rows]

    def get(self, message_id: int) -> StoredMessage | None:
        msgs = self.schema.msgs
        stmt = sa.select(*self._columns()).where(msgs.c.id == message_id)
        row = self.read(lambda c: c.execute(stmt).first())
        return StoredMessage.from_row(row) if row else None

    def _columns(self) -> list[sa.ColumnElement[object]]:
        c = self.schema.msgs.c
        return [
            c.id,
            c.container,
            c.msgid_prod,
            c.msgid_seq,
            c.expiration,
            c.priority,
            c.msg,
            c.xid,
        ]

    def find(
        self, msgid_prod: str, msgid_seq: int, container: str | None = None
    ) -> StoredMessage | None:
        c = self.schema.msgs.c
        stmt = sa.select(*self._columns()).where(
            c.msgid_prod == msgid_prod, c.msgid_seq == msgid_seq
        )
        if container is not None:
            stmt = stmt.where(c.container == container)
        row = self.read(lambda conn: conn.execute(stmt.order_by(c.id).limit(1)).first())
        return StoredMessage.from_row(row) if row else None

    def update(self, container: str, message_id: int, msg: bytes) -> None:
        check_container(container)
        check_body(msg, self.max_message_bytes)
        c = self.schema.msgs.c
        with self.transaction() as conn:
            result = conn.execute(
                sa.update(self.schema.msgs)
                .where(c.id == message_id, c.container == container)
                .values(msg=bytes(msg))
            )
        if result.rowcount != 1:
            raise MessageNotFoundError(f"message {message_id} is not stored in {container}")

    def count(self, container: str) -> int:
        return int(
            self.read(
                lambda c: c.execute(self.sql.count_queue, {"container": container}).scalar_one()
            )
        )

    def purge(self, container: str) -> int:
        """Remove the messages stored when it starts, as ActiveMQ's one DELETE does: those
        added meanwhile (IDs handed out later) stay, and a busy destination's purge ends."""
        check_container(container)
        self.check_writable()
        total = 0
        msgs = self.schema.msgs
        next_ids = (
            sa.select(msgs.c.id)
            .where(
                msgs.c.container == container,
                msgs.c.xid.is_(None),
                msgs.c.id <= self.stats_last_id(),
            )
            .order_by(msgs.c.id)
            .limit(5000)
        )  # IDs only: a purge never reads the bodies it removes
        while True:
            ids = self.read(lambda c: c.execute(next_ids).scalars().all())
            if not ids:
                return total
            total += self.remove(container, list(ids), Outcome.PURGED)

    def destinations(self) -> list[str]:
        return sorted(self.read(lambda c: c.execute(self.sql.destinations).scalars().all()))

    # ------------------------------------------------------------------ durable topics
    def add_subscription(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None = None,
        sub_dest: str | None = None,
        retroactive: bool = False,
    ) -> Subscription:
        return self.topics.add(key, selector=selector, sub_dest=sub_dest, retroactive=retroactive)

    def get_subscription(self, key: SubscriptionKey) -> Subscription | None:
        return self.topics.get(key)

    def subscriptions(self, container: str | None = None) -> list[Subscription]:
        return self.topics.of_topic(container)

    def delete_subscription(self, key: SubscriptionKey) -> None:
        self.topics.delete(key)

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        check_acks(acks)
        self._write_batch(Batch(acks=list(acks)), [])
        self._counters["acked"] += len(acks)

    def page_subscription(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        return self.topics.page(key, after, limit, max_bytes)

    def pending_count(self, key: SubscriptionKey) -> int:
        return self.topics.pending(key)

    # ------------------------------------------------------------------ XA
    def xa_prepare(self, xid: Xid, batch: Batch) -> list[int]:
        return self.xa.prepare(xid, batch)

    def xa_commit(self, xid: Xid) -> None:
        self.xa.commit(xid)

    def xa_rollback(self, xid: Xid) -> None:
        self.xa.rollback(xid)

    def xa_recover(self) -> list[PreparedTransaction]:
        return self.xa.recover()

    # ------------------------------------------------------------------ maintenance
    def cleanup(self) -> int:
        """Delete acknowledged topic messages, all priorities, in short batches."""
        total = 0
        while not self._stopping.is_set():
            deleted, more = self.clean_batch()
            total += deleted
            if not more:
                break
        return total

    def clean_batch(self) -> tuple[int, bool]:
        """One batch of :meth:`cleanup` (``cleanup_batch`` rows at most, one transaction):
        the rows deleted, and whether there may be more (the batch was full)."""
        with self.transaction() as conn:
            found = conn.execute(self.sql.cleanup_candidates, {"limit": self.cleanup_batch})
            candidates = [Removal(container, i) for i, container in found]
            deleted = self.delete_rows(conn, candidates)
        self._counters["cleaned"] += deleted
        return deleted, len(candidates) >= self.cleanup_batch

    def count_cleaned(self, rows: int) -> None:
        """Count topic messages removed because no subscription needs them."""
        self._counters["cleaned"] += rows

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        params = {
            "now": now_ms,
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if max_bytes is None else max_bytes,
        }
        if remove:
            # Rows locked first, skipping any a concurrent removal holds: every row returned
            # is one this call removed (a consumer's ack in flight may take it instead).
            with self.transaction() as conn:
                rows = [
                    StoredMessage.from_row(r)
                    for r in conn.execute(self.sql.expired_locked, params).all()
                ]
                self.delete_rows(conn, [Removal(m.container, m.id, Outcome.EXPIRED) for m in rows])
            return rows
        return self.read(
            lambda c: [StoredMessage.from_row(r) for r in c.execute(self.sql.expired, params).all()]
        )

    def stats(self) -> StoreStats:
        def read(conn: Connection) -> StoreStats:
            m = self.schema.msgs.c
            depths = conn.execute(
                sa.select(m.container, sa.func.count()).where(m.xid.is_(None)).group_by(m.container)
            ).all()
            subs = conn.execute(self.sql.count_all_subscriptions).all()
            keys = [SubscriptionKey(r[0], r[1], r[2]) for r in subs]
            return StoreStats(
                destinations={r[0]: int(r[1]) for r in depths},
                subscriptions={k: int(r[4]) for k, r in zip(keys, subs, strict=True)},
                selectors={k: r[3] for k, r in zip(keys, subs, strict=True)},
                counters={
                    **self._counters,
                    "last_id": float(self._last_id),
                    "master": float(self.locker.is_held()),
                },
            )

        return self.read(read)


def _insert_params(rows: list[dict[str, object]]) -> dict[str, object]:
    """The parallel arrays of the ``insert_msgs`` statement for :meth:`PostgresStore.rows_for`
    rows."""
    return {
        "ids": [r["id"] for r in rows],
        "containers": [r["container"] for r in rows],
        "prods": [r["msgid_prod"] for r in rows],
        "seqs": [r["msgid_seq"] for r in rows],
        "expirations": [r["expiration"] for r in rows],
        "priorities": [r["priority"] for r in rows],
        "msgs": ByteaArray(cast(bytes, r["msg"]) for r in rows),
        "xids": [r["xid"] for r in rows],
    }


def _byte_chunks(rows: list[dict[str, object]]) -> Iterator[list[dict[str, object]]]:
    """``rows`` in runs whose bodies stay within :data:`STATEMENT_BYTES` (a larger body
    alone), in order; none for no rows."""
    chunk: list[dict[str, object]] = []
    size = 0
    for row in rows:
        body = len(cast(bytes, row["msg"]))
        if chunk and size + body > STATEMENT_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(row)
        size += body
    if chunk:
        yield chunk


def _bind(rows: Rows, arrays: dict[str, object]) -> dict[str, object]:
    """Parameters for a statement part of ``rows``: the arrays, or for one row their items."""
    if rows is Rows.ONE:
        return {name: cast(list[object], values)[0] for name, values in arrays.items()}
    return arrays


def _removal_params(
    removals: Sequence[Removal], default: Outcome, prefix: str = ""
) -> dict[str, object]:
    """The parallel arrays of a removal (``:{prefix}ids``, ``containers``, ``outcomes``)."""
    return {
        f"{prefix}ids": [r.id for r in removals],
        f"{prefix}containers": [r.container for r in removals],
        f"{prefix}outcomes": [(r.outcome or default).value for r in removals],
    }


def _ack_params(
    newest: dict[tuple[SubscriptionKey, int], int], prefix: str = ""
) -> dict[str, object]:
    """The parallel arrays of an ack update (``:{prefix}containers`` ... ``ids``) for
    :meth:`PostgresStore._newest_acks`' result."""
    return {
        f"{prefix}containers": [k.container for k, _ in newest],
        f"{prefix}clients": [k.client_id for k, _ in newest],
        f"{prefix}subs": [k.sub_name for k, _ in newest],
        f"{prefix}priorities": [p for _, p in newest],
        f"{prefix}ids": list(newest.values()),
    }


__all__ = ["PostgresStore"]
