"""XA two-phase commit on ActiveMQ's XID columns (reference §6).

Prepared work is written with the XID set, so readers (which filter ``XID IS NULL``) do not
see it: adds are inserted with a ``+`` XID, queue removals mark the row with a ``-`` XID,
durable acks mark the ACKS row with the new LAST_ACKED_ID inside the XID bytes. Commit moves
prepared adds to fresh IDs (so they sort after messages committed earlier).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import LargeBinary
from sqlalchemy.engine import Connection

from mqstore.db import hold_advisory_lock
from mqstore.errors import TransactionError
from mqstore.openwire.xid_column import ENCODED_XID_START, MALFORMED_XID_FIX
from mqstore.schema import NAME_LENGTH
from mqstore.store.model import (
    Ack,
    Batch,
    Outcome,
    PreparedTransaction,
    Removal,
    StoredMessage,
    SubscriptionKey,
    Xid,
)
from mqstore.store.validation import check_batch

if TYPE_CHECKING:
    from mqstore.store.writes import MessageWrites


class XaOperations:
    """Prepare, commit, roll back and recover XA transactions for a :class:`PostgresStore`."""

    def __init__(self, store: MessageWrites) -> None:
        self.store = store

    def prepare(self, xid: Xid, batch: Batch) -> list[int]:
        """Write the work invisibly; returns the (temporary) IDs of its adds."""
        store = self.store
        check_batch(batch, store.max_message_bytes)
        if len(xid.encode("-")) > NAME_LENGTH:
            raise TransactionError(
                f"XA transaction id of {len(xid.gtrid)} + {len(xid.bqual)} bytes is too long "
                f"for ActiveMQ's XID column (at most {NAME_LENGTH} characters of base64); XA "
                "allows 64 bytes each for the global transaction id and the branch qualifier"
            )
        if not batch:
            # Nothing would reach the tables: no commit, rollback or recovery (here, in
            # another store instance, after a restart) could find the transaction.
            raise TransactionError(
                f"XA transaction {xid} has no work to prepare: nothing would be stored, so "
                "no commit or rollback could find it; a branch without work is read-only "
                "(answer XA_RDONLY, and do not commit it)"
            )
        a = store.schema.acks
        with store.transaction() as conn:
            self._hold(conn, xid)
            if xid in self._prepared(conn, xid):
                raise TransactionError(f"XA transaction {xid} is already prepared")
            ids = store.next_ids(len(batch.adds))
            store.insert_rows(conn, store.rows_for(batch.adds, ids, xid.encode("+")))
            self._mark_removals(conn, xid, batch.removes)
            # The newest ack per subscription and priority, as a commit keeps it.
            for (key, prio), last_ack in store._newest_acks(batch.acks).items():
                result = conn.execute(
                    sa.update(a)
                    .where(*self._ack_row(key, prio), a.c.xid.is_(None))
                    .values(xid=xid.encode("-", last_ack, prio))
                )
                if result.rowcount != 1:
                    # The row holds one prepared ack (ActiveMQ's format): another
                    # transaction's would silently replace it.
                    raise TransactionError(
                        f"cannot prepare an acknowledgement for subscription {key} "
                        f"(priority {prio}): no such subscription, or its acknowledgement "
                        "is already in another XA transaction"
                    )
        return ids

    def _mark_removals(self, conn: Connection, xid: Xid, removals: Sequence[Removal]) -> None:
        """Mark the rows ``removals`` name with ``xid``'s ``-`` XID, in one statement (bound
        as arrays: any number of rows); TransactionError naming one that is not visible."""
        if not removals:
            return
        params = {
            "xid": xid.encode("-"),
            "ids": [r.id for r in removals],
            "containers": [r.container for r in removals],
        }
        marked = {(i, c) for i, c in conn.execute(self.store.sql.xa_mark_removals, params)}
        for removal in removals:
            if (removal.id, removal.container) not in marked:
                raise TransactionError(
                    f"cannot prepare the removal of message {removal.id} from "
                    f"{removal.container}: not stored or already in another transaction"
                )

    def _hold(self, conn: Connection, xid: Xid) -> None:
        """Wait until no other session prepares, commits or rolls back ``xid``; held to the
        end of ``conn``'s transaction, so of two at once the second finds the first's work
        done (a second prepare is refused, a second commit or rollback finds nothing)."""
        hold_advisory_lock(conn, f"mqstore xa {self.store.schema.msgs.fullname} {xid.encode('+')}")

    def _prepared(
        self, conn: Connection, only: Xid | None = None
    ) -> dict[Xid, tuple[list[StoredMessage], list[StoredMessage], list[Ack]]]:
        """The prepared work in the tables, by transaction; with ``only``, that transaction's
        alone, found by the database and without bodies (a commit or rollback does not read
        the other transactions in doubt, nor the bodies it keeps). TransactionError naming
        every row read whose XID is not ActiveMQ's encoding of prepared work."""
        store = self.store
        m, a = store.schema.msgs, store.schema.acks
        found: dict[Xid, tuple[list[StoredMessage], list[StoredMessage], list[Ack]]] = defaultdict(
            lambda: ([], [], [])
        )
        body: sa.ColumnElement[bytes | None] = m.c.msg
        msgs_of: sa.ColumnElement[bool] = m.c.xid.is_not(None)
        acks_of: sa.ColumnElement[bool] = a.c.xid.is_not(None)
        if only is not None:
            body = sa.null().cast(LargeBinary)
            tail = only.identity()
            start = ENCODED_XID_START + 1  # substr counts from 1
            msgs_of = sa.and_(msgs_of, sa.func.substr(_xid_bytes(m.c.xid), start) == tail)
            acks_of = sa.and_(acks_of, sa.func.substr(_xid_bytes(a.c.xid), start) == tail)
        unreadable: list[str] = []
        columns = (m.c.id, m.c.container, m.c.msgid_prod, m.c.msgid_seq, m.c.expiration)
        rows = conn.execute(
            sa.select(*columns, m.c.priority, body, m.c.xid).where(msgs_of).order_by(m.c.id)
        ).all()
        for row in rows:
            msg = StoredMessage.from_row(row)
            try:
                xid, marker, _, _ = Xid.decode(str(msg.xid))
            except ValueError as exc:
                unreadable.append(
                    f"{m.fullname} row ID {msg.id} (CONTAINER {msg.container!r}): "
                    f"XID {_shortened(str(msg.xid))}: {exc}"
                )
                continue
            adds, removes, _ = found[xid]
            (adds if marker == "+" else removes).append(msg)
        acks = conn.execute(
            sa.select(a.c.container, a.c.client_id, a.c.sub_name, a.c.priority, a.c.xid)
            .where(acks_of)
            .order_by(a.c.container, a.c.client_id, a.c.sub_name, a.c.priority)
        ).all()
        for ack_row in acks:
            try:
                xid, _, last_ack, prio = Xid.decode(ack_row.xid)
            except ValueError as exc:
                unreadable.append(
                    f"{a.fullname} row of subscription CONTAINER {ack_row.container!r}, "
                    f"CLIENT_ID {ack_row.client_id!r}, SUB_NAME {ack_row.sub_name!r}, "
                    f"PRIORITY {ack_row.priority}: XID {_shortened(ack_row.xid)}: {exc}"
                )
                continue
            key = SubscriptionKey(ack_row.container, ack_row.client_id, ack_row.sub_name)
            # In plain mode ActiveMQ may write the message's JMS priority into the XID while
            # the row's PRIORITY is 0 (as its own recovery does, read it as the row's).
            found[xid][2].append(Ack(key, last_ack, store.column_priority(prio)))
        if unreadable:
            raise TransactionError(_unreadable_message(unreadable, only))
        return found

    def recover(self) -> list[PreparedTransaction]:
        """Every prepared transaction found in the tables. Refused (TransactionError naming
        the rows) while a row's XID is not ActiveMQ's encoding of prepared work: such a row
        may belong to any transaction, and a transaction manager takes the list for complete
        (one it does not find counts as finished, one found without that row could be
        committed in part)."""
        found = self.store.read(self._prepared)
        return [
            PreparedTransaction(x, tuple(ad), tuple(rm), tuple(ak))
            for x, (ad, rm, ak) in found.items()
        ]

    def _take(
        self, conn: Connection, xid: Xid
    ) -> tuple[list[StoredMessage], list[StoredMessage], list[Ack]]:
        self._hold(conn, xid)
        work = self._prepared(conn, xid).get(xid)
        if work is None:
            raise TransactionError(f"no prepared XA transaction {xid}")
        return work

    def commit(self, xid: Xid) -> None:
        """Adds move to fresh IDs and become visible; removals and acks take effect."""
        store = self.store
        with contextlib.ExitStack() as stack, store.transaction() as conn:
            adds, removes, acks = self._take(conn, xid)
            # Held until the block has committed: pages stop below the new IDs until then.
            fresh = stack.enter_context(store.reserve_ids(len(adds)))
            if adds:
                moves = {"old_ids": [r.id for r in adds], "new_ids": fresh}
                conn.execute(store.sql.xa_move_adds, moves)
            self._clear_xids(conn, removes)
            store.delete_rows(conn, [Removal(r.container, r.id) for r in removes])
            store.apply_acks(conn, acks)
            self._clear_ack_xids(conn, acks)

    def rollback(self, xid: Xid) -> None:
        """Prepared adds vanish (recorded as rolled back); removals and acks are undone."""
        store = self.store
        with store.transaction() as conn:
            adds, removes, acks = self._take(conn, xid)
            self._clear_xids(conn, adds)
            store.delete_rows(
                conn, [Removal(r.container, r.id, Outcome.XA_ROLLED_BACK) for r in adds]
            )
            self._clear_xids(conn, removes)
            self._clear_ack_xids(conn, acks)

    def _ack_row(self, key: SubscriptionKey, priority: int) -> list[sa.ColumnElement[bool]]:
        """The ACKS row of one subscription at one PRIORITY."""
        a = self.store.schema.acks.c
        return [
            a.container == key.container,
            a.client_id == key.client_id,
            a.sub_name == key.sub_name,
            a.priority == priority,
        ]

    def _clear_xids(self, conn: Connection, rows: Sequence[StoredMessage]) -> None:
        """Make prepared ``rows`` plain rows again (one statement, the IDs as one array)."""
        if rows:
            conn.execute(self.store.sql.xa_clear_xids, {"ids": [r.id for r in rows]})

    def _clear_ack_xids(self, conn: Connection, acks: list[Ack]) -> None:
        for ack in acks:
            conn.execute(
                sa.update(self.store.schema.acks)
                .where(*self._ack_row(ack.key, ack.priority))
                .values(xid=None)
            )


#: A value PostgreSQL's ``decode(..., 'base64')`` takes without an error: base64 text of
#: the standard alphabet, padded (other values, which no transaction's rows hold, are
#: left to :meth:`XaOperations._prepared` to name rather than failing the statement).
_BASE64 = "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

#: How many unreadable rows an error lists (the rest are counted).
_LISTED = 10


def _xid_bytes(xid: sa.ColumnElement[str | None]) -> sa.ColumnElement[bytes | None]:
    """The bytes an XID column holds; NULL where it is not base64 text."""
    return sa.case((xid.regexp_match(_BASE64), sa.func.decode(xid, "base64")), else_=None)


def _shortened(value: str, limit: int = 40) -> str:
    """``value`` quoted, cut to ``limit`` characters (and its length said) if longer."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"


def _unreadable_message(rows: list[str], only: Xid | None) -> str:
    """The error of the XID values ``rows`` describes, met reading ``only``'s work (or
    every transaction's, for a recover)."""
    listed = "; ".join(rows[:_LISTED])
    if len(rows) > _LISTED:
        listed += f"; and {len(rows) - _LISTED} more"
    if only is None:
        doing = (
            "cannot list the prepared XA transactions: nothing was listed (a list without "
            "these rows could leave out a transaction, or part of one, which a transaction "
            "manager would then take for finished or commit in part)"
        )
    else:
        doing = f"cannot read the prepared work of XA transaction {only}: nothing was changed"
    return (
        f"{doing}; {len(rows)} row(s) hold an XID that is not ActiveMQ's encoding of "
        f"prepared XA work: {listed}. {MALFORMED_XID_FIX}; every other row is left as it was"
    )
