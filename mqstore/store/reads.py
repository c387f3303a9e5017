"""The reads of the PostgreSQL store: pages of a queue in delivery order, lookups by ID or
JMS message id, counts, the destinations stored, and the store's statistics."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.store.model import (
    FIRST,
    NO_BYTE_BOUND,
    Cursor,
    StoredMessage,
    StoreStats,
    SubscriptionKey,
)
from mqstore.store.sessions import StoreSessions


class MessageReads(StoreSessions):
    """Pages, lookups, counts and statistics of a
    :class:`mqstore.store.postgres.PostgresStore` (whose constructor sets the state)."""

    _counters: dict[str, float]

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
        """The MSGS columns :meth:`StoredMessage.from_row` reads, in its order."""
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

    def count(self, container: str) -> int:
        return int(
            self.read(
                lambda c: c.execute(self.sql.count_queue, {"container": container}).scalar_one()
            )
        )

    def destinations(self) -> list[str]:
        return sorted(self.read(lambda c: c.execute(self.sql.destinations).scalars().all()))

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


__all__ = ["MessageReads"]
