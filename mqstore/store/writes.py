"""The write path of the PostgreSQL store: adds, removes and durable acks committed as one
unit (one autocommitted statement where the bodies fit, else one transaction), body
rewrites, and the row statements that transactions of the other parts reuse."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, OperationalError

from mqstore.db import LOCK_NOT_AVAILABLE, ByteaArray, describe_connect_error, sqlstate
from mqstore.errors import (
    CommitOutcomeUnknownError,
    DatabaseUnavailableError,
    MessageNotFoundError,
)
from mqstore.statements import CommitShape, Rows, commit_batch
from mqstore.store.commit_connections import CommitConnections
from mqstore.store.model import Ack, Batch, NewMessage, Outcome, Removal, SubscriptionKey
from mqstore.store.sessions import StoreSessions, driver_refusals
from mqstore.store.validation import check_acks, check_batch, check_body, check_container

#: Bytes of message bodies one statement carries at most. PostgreSQL refuses a protocol
#: message (and an array value) of 1 GiB or more, and ends the connection; larger work
#: goes in several statements of one transaction.
STATEMENT_BYTES = 256 * 1024 * 1024


def _now_ms() -> int:
    return int(time.time() * 1000)


class MessageWrites(StoreSessions):
    """Commits and row writes of a :class:`mqstore.store.postgres.PostgresStore` (whose
    constructor sets the state)."""

    prefix: str
    history: bool
    history_bodies: bool
    max_message_bytes: int
    _prioritized: bool
    _counters: dict[str, float]
    _commits: CommitConnections
    _commit_sql: dict[CommitShape, str]

    # ------------------------------------------------------------------ row statements
    @property
    def prioritized(self) -> bool:
        return self._prioritized

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
            with driver_refusals(self.engine, "nothing of the batch was written"):
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
            error = CommitOutcomeUnknownError if unknown else DatabaseUnavailableError
            raise error(
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

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        check_acks(acks)
        self._write_batch(Batch(acks=list(acks)), [])
        self._counters["acked"] += len(acks)


def _insert_params(rows: list[dict[str, object]]) -> dict[str, object]:
    """The parallel arrays of the ``insert_msgs`` statement for :meth:`MessageWrites.rows_for`
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
    :meth:`MessageWrites._newest_acks`' result."""
    return {
        f"{prefix}containers": [k.container for k, _ in newest],
        f"{prefix}clients": [k.client_id for k, _ in newest],
        f"{prefix}subs": [k.sub_name for k, _ in newest],
        f"{prefix}priorities": [p for _, p in newest],
        f"{prefix}ids": list(newest.values()),
    }


__all__ = ["STATEMENT_BYTES", "MessageWrites"]
