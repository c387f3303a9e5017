"""Durable topic subscriptions on ACTIVEMQ_ACKS, as ActiveMQ's JDBC store keeps them.

One stored copy per topic message; each subscription is one ACKS row (ten in prioritized
mode, one per priority) whose LAST_ACKED_ID says what it has consumed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.db import hold_advisory_lock
from mqstore.store.model import (
    FIRST,
    NO_BYTE_BOUND,
    Cursor,
    Removal,
    StoredMessage,
    Subscription,
    SubscriptionKey,
)
from mqstore.store.validation import check_subscription, check_topic

if TYPE_CHECKING:
    from mqstore.store.maintenance import Maintenance


class TopicOperations:
    """Create, look up, list, delete and page durable subscriptions of a PostgresStore."""

    def __init__(self, store: Maintenance) -> None:
        self.store = store

    def add(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None,
        sub_dest: str | None,
        retroactive: bool,
    ) -> Subscription:
        """Create it (LAST_ACKED_ID = newest ID, or -1 when retroactive), or return it."""
        check_subscription(key, selector, sub_dest)
        existing = self.get(key)
        if existing is not None:
            return existing
        store = self.store
        priorities = range(10) if store.prioritized else (0,)
        with store.transaction() as conn:
            self._hold_topic(conn, key.container)
            created = self._select(self._filter(key), conn)  # by a call that held it first
            if created:
                return created[0]
            start = (
                -1
                if retroactive
                else int(
                    conn.execute(
                        sa.select(sa.func.coalesce(sa.func.max(store.schema.msgs.c.id), 0))
                    ).scalar_one()
                )
            )
            conn.execute(
                sa.insert(store.schema.acks),
                [
                    {
                        "container": key.container,
                        "client_id": key.client_id,
                        "sub_name": key.sub_name,
                        "selector": selector,
                        "sub_dest": sub_dest or key.container,
                        "last_acked_id": start,
                        "priority": p,
                    }
                    for p in priorities
                ],
            )
        return Subscription(key, selector, sub_dest or key.container, start)

    def _hold_topic(self, conn: Connection, container: str) -> None:
        """Wait until no other session creates or deletes a subscription of ``container``;
        held to the end of ``conn``'s transaction, so the second of two finds the first's
        rows committed (an existing subscription, or no subscription left beside its own)."""
        hold_advisory_lock(conn, f"mqstore topic {self.store.schema.acks.fullname} {container}")

    def _filter(self, key: SubscriptionKey) -> sa.ColumnElement[bool]:
        a = self.store.schema.acks.c
        return sa.and_(
            a.container == key.container, a.client_id == key.client_id, a.sub_name == key.sub_name
        )

    def get(self, key: SubscriptionKey) -> Subscription | None:
        """One subscription, or None."""
        subs = self._select(self._filter(key))
        return subs[0] if subs else None

    def of_topic(self, container: str | None) -> list[Subscription]:
        """Every durable subscription, or those of one topic."""
        a = self.store.schema.acks.c
        cond = a.container.like("topic://%") if container is None else a.container == container
        return self._select(cond)

    def _select(
        self, cond: sa.ColumnElement[bool], conn: Connection | None = None
    ) -> list[Subscription]:
        a = self.store.schema.acks.c
        stmt = (
            sa.select(
                a.container,
                a.client_id,
                a.sub_name,
                sa.func.max(a.selector),
                sa.func.max(a.sub_dest),
                sa.func.min(a.last_acked_id),
            )
            .where(cond, a.priority < 10)  # PRIORITY 11 marks virtual-topic queues
            .group_by(a.container, a.client_id, a.sub_name)
            .order_by(a.container, a.client_id, a.sub_name)
        )
        rows = (
            conn.execute(stmt).all()
            if conn is not None
            else self.store.read(lambda c: c.execute(stmt).all())
        )
        return [
            Subscription(
                SubscriptionKey(r[0], r[1], r[2]), r[3], r[4], -1 if r[5] is None else int(r[5])
            )
            for r in rows
        ]

    def delete(self, key: SubscriptionKey) -> None:
        """Delete it; once a topic's last subscription is gone its messages go too."""
        # Refused as add() refuses it: no subscription left on a queue's container would
        # otherwise remove every message of that queue (and its virtual-topic marker row).
        check_topic(key.container)
        store = self.store
        with store.transaction() as conn:
            self._hold_topic(conn, key.container)
            conn.execute(sa.delete(store.schema.acks).where(self._filter(key)))
            while True:
                ids = (
                    conn.execute(
                        store.sql.orphan_topic_ids, {"container": key.container, "limit": 5000}
                    )
                    .scalars()
                    .all()
                )
                if not ids:
                    break
                store.count_cleaned(
                    store.delete_rows(conn, [Removal(key.container, i) for i in ids])
                )

    def page(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        """Pending messages in delivery order (prioritized: after the LAST_ACKED_ID of their
        PRIORITY, by (-PRIORITY, ID); plain: after the least LAST_ACKED_ID, by ID, PRIORITY
        given as 0), bounded as :meth:`mqstore.store.port.Store.page`."""
        cursor = after or FIRST
        params = {
            "container": key.container,
            "client_id": key.client_id,
            "sub_name": key.sub_name,
            "bound": self.store.bound(),
            "neg_priority": -cursor.priority,
            "after_id": cursor.id,
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if max_bytes is None else max_bytes,
        }
        sql = self.store.sql.page_subscription
        rows = self.store.read(lambda c: c.execute(sql, params).all())
        return [StoredMessage.from_row(r) for r in rows]

    def pending(self, key: SubscriptionKey) -> int:
        """How many messages the subscription has not acknowledged."""
        params = {"container": key.container, "client_id": key.client_id, "sub_name": key.sub_name}
        sql = self.store.sql.count_subscription
        return int(self.store.read(lambda c: c.execute(sql, params).scalar_one()))
