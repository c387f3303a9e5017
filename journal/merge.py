"""Database reads of the journaled store, and merging them with the in-memory window.

Every query takes the IDs the pending state removed (and the containers it purged) and
leaves those rows out, so a read sees the database as the next checkpoint will leave it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from mqstore.statements import PLAIN_AFTER, bytes_bounded_page, id_ordered_page
from mqstore.store.model import (
    NO_BYTE_BOUND,
    Cursor,
    StoredMessage,
    Subscription,
    SubscriptionKey,
    within_bytes,
)
from mqstore.store.postgres import PostgresStore

__all__ = ["DatabaseView", "merge_rows", "subscription_floors"]

T = TypeVar("T")
_COLS = "m.id, m.container, m.msgid_prod, m.msgid_seq, m.expiration, m.priority, m.msg, m.xid"
_IDS = "CAST(:excl AS bigint[])"


def merge_rows(
    db: Sequence[StoredMessage],
    mem: Sequence[StoredMessage],
    limit: int,
    updates: dict[int, bytes],
    max_bytes: int | None = None,
    slack: int = 0,
) -> list[StoredMessage]:
    """Database rows and memory adds in delivery order, each ID once, at most ``limit``
    and bounded by ``max_bytes`` (:func:`~mqstore.store.model.within_bytes`).

    When ``db`` may have stopped short (``limit`` rows, or as many bytes as the bound its
    query had: ``max_bytes + slack``), no memory add sorting after its last row is
    returned: a database row may lie between."""
    stopped_short = len(db) >= limit or (
        max_bytes is not None and sum(len(r.msg) for r in db) >= max_bytes + slack
    )
    by_id: dict[int, StoredMessage] = {}
    for row in db:
        body = updates.get(row.id)
        by_id[row.id] = replace(row, msg=body) if body is not None else row
    for row in mem:
        by_id[row.id] = row
    rows = sorted(by_id.values(), key=lambda r: (-r.priority, r.id))
    if stopped_short and db:
        last = (-db[-1].priority, db[-1].id)
        rows = [r for r in rows if (-r.priority, r.id) <= last]
    return within_bytes(rows[:limit], max_bytes)


def subscription_floors(
    rows: dict[int, int | None], acks: dict[int, int], prioritized: bool
) -> dict[int, int]:
    """A subscription's floors: its LAST_ACKED_ID per PRIORITY (``rows``, None for NULL)
    advanced by the window's ``acks`` per priority, as the database store reads the rows once
    those acks are applied (an ack sets a NULL row). Until then a NULL row delivers nothing,
    as ``m.id > NULL`` matches no row: prioritized, its priority is left out (nothing of it
    is delivered); plain, it drops out of the least, as ``min()`` skips it, and with no other
    row the floors are empty (nothing is delivered)."""
    if prioritized:
        floors = {p: v for p, v in rows.items() if v is not None}
        for p, i in acks.items():
            if p in rows:  # an ack of a priority without a row updates nothing
                floors[p] = max(floors.get(p, -1), i)
        return floors
    if acks:  # a plain ack sets every row below it, a NULL row too
        upto = max(acks.values())
        return {0: min(upto if v is None else max(v, upto) for v in rows.values())}
    known = [v for v in rows.values() if v is not None]
    return {0: min(known)} if known else {}


class DatabaseView:
    """Queries on the wrapped store's tables (read-only).

    A subscription's reads take ``floors``, its LAST_ACKED_ID per PRIORITY column value
    (:func:`subscription_floors`); a priority missing from them delivers nothing.
    Prioritized, a row is pending above the floor of its PRIORITY, in (-PRIORITY, ID) order;
    plain, above the least floor whatever its PRIORITY, in ID order with PRIORITY given as 0,
    as ``PostgresStore`` reads them (:func:`mqstore.statements.statements_for`).
    """

    def __init__(self, pg: PostgresStore) -> None:
        self.pg = pg
        self.m = pg.schema.msgs.name
        self.a = pg.schema.acks.name
        self.prioritized = pg.prioritized

    def _read(self, fn: Callable[[Connection], T]) -> T:
        return self.pg.read(fn)  # the store's read helper maps database errors

    def _rows(self, sql: str, params: dict[str, object]) -> list[StoredMessage]:
        rows = self._read(lambda c: c.execute(sa.text(sql), params).all())
        return [StoredMessage(*r) for r in rows]

    @staticmethod
    def _floors(floors: dict[int, int] | None) -> tuple[str, dict[str, object]]:
        """The JOIN keeping rows above the floor of their PRIORITY (prioritized)."""
        if floors is None:
            return "", {}
        join = (
            " JOIN unnest(CAST(:fp AS bigint[]), CAST(:fl AS bigint[])) AS f(priority, last) "
            "ON m.priority = f.priority AND m.id > f.last"
        )
        return join, {"fp": list(floors), "fl": list(floors.values())}

    def page(
        self,
        container: str,
        after: Cursor,
        limit: int,
        bound: int,
        excl: list[int],
        max_bytes: int | None = None,
        floors: dict[int, int] | None = None,
    ) -> list[StoredMessage]:
        """Visible rows after ``after`` in delivery order, removed IDs left out, bounded
        by ``limit`` and ``max_bytes``."""
        if floors is not None and not self.prioritized:
            return self._plain_page(container, after, limit, bound, excl, max_bytes, floors)
        join, params = self._floors(floors)
        sql = bytes_bounded_page(
            f"FROM {self.m} m{join} WHERE m.container = :container "
            f"AND m.xid IS NULL AND m.id < :bound AND m.id <> ALL({_IDS}) "
            "AND (- m.priority, m.id) > (:neg_priority, :after_id) "
        )
        params.update(
            container=container,
            bound=bound,
            excl=excl,
            neg_priority=-after.priority,
            after_id=after.id,
            limit=limit,
            max_bytes=NO_BYTE_BOUND if max_bytes is None else max_bytes,
        )
        return self._rows(sql, params)

    def _plain_page(
        self,
        container: str,
        after: Cursor,
        limit: int,
        bound: int,
        excl: list[int],
        max_bytes: int | None,
        floors: dict[int, int],
    ) -> list[StoredMessage]:
        """A plain store's subscription page: rows above the least floor, in ID order."""
        if not floors:
            return []
        sql = id_ordered_page(
            self.m,
            f"m.container = :container AND m.xid IS NULL AND m.id < :bound "
            f"AND m.id <> ALL({_IDS}) AND {PLAIN_AFTER} AND m.id > :position",
        )
        params: dict[str, object] = {
            "container": container,
            "bound": bound,
            "excl": excl,
            "neg_priority": -after.priority,
            "after_id": after.id,
            "position": min(floors.values()),
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if max_bytes is None else max_bytes,
        }
        return self._rows(sql, params)

    def shrinkage(self, updates: dict[int, bytes]) -> int:
        """How many bytes the rewritten bodies ``updates`` (ID -> new body) of rows have
        less than the stored ones: a byte-bounded query of stored sizes, its bound raised
        by that, returns every row the bound holds at the new sizes (and maybe more)."""
        if not updates:
            return 0
        sql = f"SELECT id, octet_length(msg) FROM {self.m} WHERE id = ANY({_IDS})"
        rows = self._read(lambda c: c.execute(sa.text(sql), {"excl": list(updates)}).all())
        return sum(max(0, int(r[1] or 0) - len(updates[int(r[0])])) for r in rows)

    def count(self, container: str, excl: list[int], floors: dict[int, int] | None = None) -> int:
        """Visible rows of a container (above a subscription's ``floors``), removed IDs
        left out."""
        join, params = self._floors(None if not self.prioritized else floors)
        above = ""
        if floors is not None and not self.prioritized:
            if not floors:
                return 0
            params["position"] = min(floors.values())
            above = " AND m.id > :position"
        sql = (
            f"SELECT count(*) FROM {self.m} m{join} WHERE m.container = :container "
            f"AND m.xid IS NULL AND m.id <> ALL({_IDS}){above}"
        )
        params.update(container=container, excl=excl)
        return int(self._read(lambda c: c.execute(sa.text(sql), params).scalar_one()))

    def existing_keys(
        self, keys: list[tuple[str, str, int]]
    ) -> dict[tuple[str, str, int], tuple[int, bool]]:
        """(ID, XA-prepared) of rows already holding these (container, producer id, sequence)
        keys."""
        if not keys:
            return {}
        sql = (
            "SELECT m.container, m.msgid_prod, m.msgid_seq, m.id, m.xid IS NOT NULL "
            f"FROM {self.m} m JOIN "
            "unnest(CAST(:c AS text[]), CAST(:p AS text[]), CAST(:s AS bigint[])) AS k(c, p, s) "
            "ON m.msgid_prod = k.p AND m.msgid_seq = k.s AND m.container = k.c"
        )
        params = {"c": [k[0] for k in keys], "p": [k[1] for k in keys], "s": [k[2] for k in keys]}
        rows = self._read(lambda c: c.execute(sa.text(sql), params).all())
        return {(r[0], r[1], int(r[2])): (int(r[3]), bool(r[4])) for r in rows}

    def max_sequences(self, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The highest stored MSGID_SEQ per (container, producer id); -1 when none."""
        sql = (
            "SELECT k.c, k.p, coalesce((SELECT max(m.msgid_seq) FROM "
            f"{self.m} m WHERE m.container = k.c AND m.msgid_prod = k.p), -1) "
            "FROM unnest(CAST(:c AS text[]), CAST(:p AS text[])) AS k(c, p)"
        )
        params = {"c": [c for c, _ in pairs], "p": [p for _, p in pairs]}
        rows = self._read(lambda c: c.execute(sa.text(sql), params).all())
        return {(r[0], r[1]): int(r[2]) for r in rows}

    def visible(self, ids: list[int]) -> dict[int, str]:
        """Container of each of these IDs stored outside any XA transaction."""
        sql = f"SELECT id, container FROM {self.m} WHERE id = ANY({_IDS}) AND xid IS NULL"
        rows = self._read(lambda c: c.execute(sa.text(sql), {"excl": ids}).all())
        return {int(r[0]): r[1] for r in rows}

    def exists(self, message_id: int, container: str) -> bool:
        """Whether the row is stored (in or out of an XA transaction)."""
        sql = f"SELECT 1 FROM {self.m} WHERE id = :id AND container = :container"
        params = {"id": message_id, "container": container}
        return self._read(lambda c: c.execute(sa.text(sql), params).first()) is not None

    def find(self, prod: str, seq: int, container: str | None) -> list[StoredMessage]:
        """Rows with this JMS message id, oldest first."""
        sql = f"SELECT {_COLS} FROM {self.m} m WHERE m.msgid_prod = :p AND m.msgid_seq = :s"
        params: dict[str, object] = {"p": prod, "s": seq}
        if container is not None:
            sql += " AND m.container = :container"
            params["container"] = container
        return self._rows(sql + " ORDER BY m.id LIMIT 100", params)

    def max_id(self) -> int:
        """The highest stored message ID (0 when empty)."""
        sql = f"SELECT coalesce(max(id), 0) FROM {self.m}"
        return int(self._read(lambda c: c.execute(sa.text(sql)).scalar_one()))

    def destinations(
        self, removed: list[int], purged: list[str], deleted: set[SubscriptionKey]
    ) -> set[str]:
        """Containers with rows not removed, or with subscriptions not deleted."""
        sql = (
            f"SELECT DISTINCT container FROM {self.m} WHERE id <> ALL({_IDS}) "
            "AND NOT (container = ANY(CAST(:purged AS text[])) AND xid IS NULL)"
        )
        params = {"excl": removed, "purged": purged}
        found = set(self._read(lambda c: c.execute(sa.text(sql), params).scalars().all()))
        subs = f"SELECT DISTINCT container, client_id, sub_name FROM {self.a} WHERE priority < 11"
        for r in self._read(lambda c: c.execute(sa.text(subs)).all()):
            if SubscriptionKey(r[0], r[1], r[2]) not in deleted:
                found.add(r[0])
        return found

    def subscription_rows(
        self, container: str | None, key: SubscriptionKey | None = None
    ) -> dict[SubscriptionKey, tuple[Subscription, dict[int, int | None]]]:
        """Subscriptions from ACTIVEMQ_ACKS with their LAST_ACKED_ID per priority (None
        where NULL)."""
        sql = (
            "SELECT container, client_id, sub_name, selector, sub_dest, priority, last_acked_id "
            f"FROM {self.a} WHERE priority < 10"
        )
        params: dict[str, object] = {}
        if container is None:
            sql += " AND container LIKE 'topic://%'"
        else:
            sql += " AND container = :container"
            params["container"] = container
        if key is not None:
            sql += " AND client_id = :client_id AND sub_name = :sub_name"
            params.update(client_id=key.client_id, sub_name=key.sub_name)
        out: dict[SubscriptionKey, tuple[Subscription, dict[int, int | None]]] = {}
        for r in self._read(lambda c: c.execute(sa.text(sql), params).all()):
            k = SubscriptionKey(r[0], r[1], r[2])
            sub, floors = out.setdefault(k, (Subscription(k, r[3], r[4], -1), {}))
            floors[int(r[5])] = None if r[6] is None else int(r[6])
            if r[3] is not None or r[4] is not None:
                out[k] = (Subscription(k, sub.selector or r[3], sub.sub_dest or r[4], -1), floors)
        return out

    def depths(self, removed: list[int], purged: list[str]) -> dict[str, int]:
        """Visible rows per container, removed ones left out."""
        sql = (
            f"SELECT container, count(*) FROM {self.m} WHERE xid IS NULL "
            f"AND id <> ALL({_IDS}) AND container <> ALL(CAST(:purged AS text[])) "
            "GROUP BY container"
        )
        params = {"excl": removed, "purged": purged}
        return {r[0]: int(r[1]) for r in self._read(lambda c: c.execute(sa.text(sql), params))}
