"""Reads of the journaled store: the database merged with the un-checkpointed window.

Memory adds and database rows (minus the rows the window removed or purged) are merged in
delivery order with the same keyset cursor semantics as PostgresStore; counts are database
counts without removed rows plus live memory adds; memory acks and subscription changes
override ACTIVEMQ_ACKS rows.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import lru_cache

import sqlalchemy as sa
from sqlalchemy.sql.elements import TextClause

from journal.admission import Admission
from journal.merge import DatabaseView, merge_rows, subscription_floors
from journal.state import PendingState
from journal.writer import Journal
from mqstore.statements import bytes_bounded_expiry
from mqstore.store.model import (
    FIRST,
    NO_BOUND,
    NO_BYTE_BOUND,
    Cursor,
    StoredMessage,
    StoreStats,
    Subscription,
    SubscriptionKey,
)
from mqstore.store.postgres import PostgresStore

__all__ = ["MergedReads"]


@lru_cache(maxsize=16)
def _expired_sql(msgs: str) -> TextClause:
    """Expired visible rows of table ``msgs`` as ``PostgresStore.expire`` reads them, the
    IDs :excl and containers :purged left out, with the count of candidate rows."""
    return sa.text(
        bytes_bounded_expiry(
            f"FROM {msgs} m WHERE m.expiration > 0 AND m.expiration < :now "
            "AND m.xid IS NULL AND m.id <> ALL(CAST(:excl AS bigint[])) "
            "AND m.container <> ALL(CAST(:purged AS text[])) ",
            candidates=True,
        )
    )


def _plus(max_bytes: int | None, slack: int) -> int | None:
    return None if max_bytes is None else max_bytes + slack


class MergedReads:
    """The read half of :class:`journal.store.JournaledStore`."""

    pg: PostgresStore
    db: DatabaseView
    _admission: Admission
    _lock: threading.Lock
    _state: PendingState
    _inflight: dict[int, int]
    _counters: dict[str, float]
    _ckpt_ms: list[float]

    @property
    def journal(self) -> Journal:
        raise NotImplementedError

    def _bound(self) -> int:
        # XA commits write the database directly, under IDs the database store reserved.
        own = min(self._inflight) if self._inflight else NO_BOUND
        return min(own, self.pg.bound())

    def _snapshot(
        self, container: str, after: Cursor, limit: int, floors: dict[int, int] | None = None
    ) -> tuple[int, list[StoredMessage], list[int], bool, dict[int, bytes]]:
        with self._lock:
            bound = self._bound()
            state = self._state
            mem = state.page(container, after, limit, bound, floors)
            return (
                bound,
                mem,
                state.excluded(container),
                container in state.purged,
                {i: b for i, (c, b) in state.updates.items() if c == container},
            )

    def page(
        self, container: str, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        cursor = after or FIRST
        generation = self._admission.generation()
        bound, mem, excl, purged, upd = self._snapshot(container, cursor, limit)
        if purged:
            return merge_rows([], mem, limit, upd, max_bytes)
        slack = self._slack(max_bytes, upd)
        db = self.db.page(container, cursor, limit, bound, excl, _plus(max_bytes, slack))
        # A consumer removes what it read: its removals need not ask the database again.
        self._admission.seen_in_database(db, generation)
        return merge_rows(db, mem, limit, upd, max_bytes, slack)

    def _slack(self, max_bytes: int | None, updates: dict[int, bytes]) -> int:
        """What a byte-bounded database read adds to its bound: the window's rewritten
        bodies count at their new sizes, the database's query counts the stored ones."""
        return 0 if max_bytes is None else self.db.shrinkage(updates)

    def _expired_in_database(
        self,
        now_ms: int,
        limit: int,
        removed: list[int],
        purged: list[str],
        max_bytes: int | None,
        updates: dict[int, bytes],
    ) -> tuple[list[StoredMessage], bool]:
        """Expired database rows by (EXPIRATION, ID), removed IDs and purged containers left
        out, bounded by ``limit`` and ``max_bytes`` as in ``PostgresStore.expire`` (raised
        by what the ``updates`` of the window shrank: the caller bounds again); and whether
        rows after the last one were left out (by either bound)."""
        bound = _plus(max_bytes, self._slack(max_bytes, updates))
        params = {
            "now": now_ms,
            "limit": limit,
            "max_bytes": NO_BYTE_BOUND if bound is None else bound,
            "excl": removed,
            "purged": purged,
        }
        sql = _expired_sql(self.pg.schema.msgs.name)
        found = self.pg.read(lambda c: c.execute(sql, params).all())
        candidates = int(found[0][-1]) if found else 0
        rows = [StoredMessage.from_row(r) for r in found]
        return rows, candidates >= limit or len(rows) < candidates

    def get(self, message_id: int) -> StoredMessage | None:
        with self._lock:
            state = self._state
            if message_id in state.adds:
                return state.adds[message_id]
            if message_id in state.removed:
                return None
            purged, upd = set(state.purged), state.updates.get(message_id)
        row = self.pg.get(message_id)
        if row is None or (row.container in purged and row.xid is None):
            return None
        return replace(row, msg=upd[1]) if upd else row

    def find(
        self, msgid_prod: str, msgid_seq: int, container: str | None = None
    ) -> StoredMessage | None:
        with self._lock:
            state = self._state
            mem = [
                state.adds[i]
                for (c, p, s), i in state.keys.items()
                if p == msgid_prod and s == msgid_seq and (container is None or c == container)
            ]
            removed, purged = set(state.removed), set(state.purged)
        rows = [
            r
            for r in self.db.find(msgid_prod, msgid_seq, container)
            if r.id not in removed and not (r.container in purged and r.xid is None)
        ]
        found = sorted(mem + rows, key=lambda r: r.id)
        if not found:
            return None
        return self.get(found[0].id) if found[0] in rows else found[0]

    def count(self, container: str) -> int:
        with self._lock:
            state = self._state
            live, purged = state.live.get(container, 0), container in state.purged
            excl = state.excluded(container) + state.in_flight_live(container)
        return live + (0 if purged else self.db.count(container, excl))

    def destinations(self) -> list[str]:
        with self._lock:
            state = self._state
            removed, purged = list(state.removed), list(state.purged)
            mem = state.container_of_live() | {k.container for k in state.subs_added}
            deleted = set(state.subs_deleted) - set(state.subs_added)
        found = self.db.destinations(removed, purged, deleted)
        return sorted(found | mem)

    def _positions(self, key: SubscriptionKey) -> tuple[Subscription, dict[int, int]] | None:
        """A subscription and its effective last-acked ID per column priority: plain, one
        (priority 0), the least LAST_ACKED_ID of its rows, each advanced by its acks (an
        ack of a plain store advances every row, so any PRIORITY it names); NULL rows as
        :func:`journal.merge.subscription_floors` reads them."""
        with self._lock:
            state = self._state
            added = state.subs_added.get(key)
            deleted = key in state.subs_deleted
            acks = {p: i for (k, p), i in state.acks.items() if k == key}
        rows: dict[int, int | None]
        if added is not None:
            rows = {p: added.start for p in (range(10) if added.prioritized else (0,))}
            sub = Subscription(key, added.selector, added.sub_dest or key.container, 0)
        elif deleted:
            return None
        else:
            found = self.db.subscription_rows(key.container, key)
            if key not in found:
                return None
            sub, rows = found[key]
        floors = subscription_floors(rows, acks, self.pg.prioritized)
        return (
            Subscription(sub.key, sub.selector, sub.sub_dest, min(floors.values(), default=-1)),
            floors,
        )

    def get_subscription(self, key: SubscriptionKey) -> Subscription | None:
        found = self._positions(key)
        return found[0] if found else None

    def subscriptions(self, container: str | None = None) -> list[Subscription]:
        with self._lock:
            state = self._state
            keys = {k for k in state.subs_added if container is None or k.container == container}
            deleted = set(state.subs_deleted)
        keys |= {k for k in self.db.subscription_rows(container) if k not in deleted}
        subs = [self._positions(k) for k in keys]
        out = [s[0] for s in subs if s is not None]
        return sorted(out, key=lambda s: (s.key.container, s.key.client_id, s.key.sub_name))

    def page_subscription(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        found = self._positions(key)
        if found is None:
            return []
        floors = found[1]
        cursor = after or FIRST
        bound, mem, excl, purged, upd = self._snapshot(key.container, cursor, limit, floors)
        if purged:
            return merge_rows([], mem, limit, upd, max_bytes)
        slack = self._slack(max_bytes, upd)
        db = self.db.page(
            key.container, cursor, limit, bound, excl, _plus(max_bytes, slack), floors
        )
        return merge_rows(db, mem, limit, upd, max_bytes, slack)

    def pending_count(self, key: SubscriptionKey) -> int:
        found = self._positions(key)
        if found is None:
            return 0
        floors = found[1]
        with self._lock:
            state = self._state
            live = state.count_after(key.container, floors)
            excl = state.excluded(key.container) + state.in_flight_live(key.container)
            purged = key.container in state.purged
        return live + (0 if purged else self.db.count(key.container, excl, floors))

    def stats(self) -> StoreStats:
        with self._lock:
            state = self._state
            live = {c: n for c, n in state.live.items() if n}
            removed, purged = list(state.removed) + state.in_flight_live(), list(state.purged)
            pending = state.pending_bytes
        depths = self.db.depths(removed, purged)
        for c, n in live.items():
            depths[c] = depths.get(c, 0) + n
        listed = self.subscriptions()
        subs = {s.key: self.pending_count(s.key) for s in listed}
        jstats = self.journal.stats()
        ms = self._ckpt_ms
        counters = {
            **self._counters,
            "last_checkpoint_ms": ms[-1] if ms else 0.0,
            "avg_checkpoint_ms": sum(ms) / len(ms) if ms else 0.0,
            "journal_bytes": float(jstats.bytes_on_disk),
            "journal_fsyncs": float(jstats.fsyncs),
            "journal_records": float(jstats.records_appended),
            "pending_bytes": float(pending),
            "last_id": float(self.pg.stats_last_id()),
            "master": float(self.pg.locker.is_held()),
        }
        selectors = {s.key: s.selector for s in listed}
        return StoreStats(depths, subs, counters, selectors)
