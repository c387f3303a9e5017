"""An in-memory :class:`~mqstore.store.port.Store`, only for fast broker unit tests.

Same contract as the PostgreSQL store as far as a broker can see (IDs, delivery order,
keyset paging, durable subscriptions, batches); nothing survives the process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from mqstore.errors import DuplicateMessageError, MessageNotFoundError, StoreClosedError
from mqstore.store.model import (
    EXPIRE_MAX_BYTES,
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
    within_bytes,
)


def _order(priority: int, ident: int) -> tuple[int, int]:
    return (-priority, ident)


class MemoryStore:
    """Dict-backed store; thread-safe via one lock. ``calls`` counts method calls."""

    def __init__(self, *, prioritized: bool = False) -> None:
        self._prioritized = prioritized
        self._lock = threading.RLock()
        self._msgs: dict[int, StoredMessage] = {}
        self._keys: set[tuple[str, str, int]] = set()
        self._subs: dict[SubscriptionKey, Subscription] = {}
        #: LAST_ACKED_ID per PRIORITY row of each subscription (ten rows when prioritized,
        #: as ActiveMQ's; a subscription's ``last_acked_id`` is their least, as in PostgreSQL)
        self._acked: dict[SubscriptionKey, dict[int, int]] = {}
        self._xa: dict[Xid, Batch] = {}
        self._next_id = 1
        self._started = False
        self.history: list[tuple[int, Outcome]] = []
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if not self._started:
            raise StoreClosedError("the store is not started; call start() first")

    def start(self) -> None:
        self._started = True

    def stop(self) -> None:
        self._started = False

    @property
    def prioritized(self) -> bool:
        return self._prioritized

    def _check(self, messages: Sequence[NewMessage]) -> None:
        batch: set[tuple[str, str, int]] = set()
        for m in messages:
            key = (m.container, m.msgid_prod, m.msgid_seq)
            if key in self._keys or key in batch:
                raise DuplicateMessageError(f"message {m.msgid_prod}:{m.msgid_seq} already stored")
            batch.add(key)

    def _add(self, messages: Sequence[NewMessage]) -> list[int]:
        self._check(messages)
        ids: list[int] = []
        for m in messages:
            ident = self._next_id
            self._next_id += 1
            prio = m.priority if self._prioritized else 0
            self._msgs[ident] = StoredMessage(
                ident, m.container, m.msgid_prod, m.msgid_seq, m.expiration, prio, m.msg
            )
            self._keys.add((m.container, m.msgid_prod, m.msgid_seq))
            ids.append(ident)
        return ids

    def new_producers(self, prefix: str) -> None:
        """Nothing to do: duplicates are checked in memory."""

    def add(self, messages: Sequence[NewMessage]) -> list[int]:
        with self._lock:
            self._count("add")
            return self._add(messages)

    def _remove(self, removals: Sequence[Removal]) -> int:
        n = 0
        for r in removals:
            row = self._msgs.get(r.id)
            if row is not None and row.container == r.container:
                del self._msgs[r.id]
                self._keys.discard((row.container, row.msgid_prod or "", row.msgid_seq or 0))
                self.history.append((r.id, r.outcome or Outcome.ACKNOWLEDGED))
                n += 1
        return n

    def remove(
        self, container: str, ids: Sequence[int], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> int:
        with self._lock:
            self._count("remove")
            return self._remove([Removal(container, i, outcome) for i in ids])

    def commit(self, batch: Batch) -> list[int]:
        with self._lock:
            self._count("commit")
            self._check(batch.adds)  # the only failure: checked before anything changes
            ids = self._add(batch.adds)
            self._remove(batch.removes)
            self._ack(batch.acks)
            return ids

    def page(
        self, container: str, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            self._count("page")
            rows = [r for r in self._msgs.values() if r.container == container and r.xid is None]
            if after is not None:
                mark = _order(after.priority, after.id)
                rows = [r for r in rows if _order(r.priority, r.id) > mark]
            rows.sort(key=lambda r: _order(r.priority, r.id))
            return within_bytes(rows[:limit], max_bytes)

    def get(self, message_id: int) -> StoredMessage | None:
        with self._lock:
            return self._msgs.get(message_id)

    def find(
        self, msgid_prod: str, msgid_seq: int, container: str | None = None
    ) -> StoredMessage | None:
        with self._lock:
            for r in self._msgs.values():
                if (r.msgid_prod, r.msgid_seq) == (msgid_prod, msgid_seq) and (
                    container is None or r.container == container
                ):
                    return r
            return None

    def update(self, container: str, message_id: int, msg: bytes) -> None:
        with self._lock:
            self._count("update")
            row = self._msgs.get(message_id)
            if row is None or row.container != container:
                raise MessageNotFoundError(f"message {message_id} is not stored in {container}")
            self._msgs[message_id] = StoredMessage(
                row.id, row.container, row.msgid_prod, row.msgid_seq, row.expiration,
                row.priority, msg,
            )  # fmt: skip

    def count(self, container: str) -> int:
        with self._lock:
            return sum(1 for r in self._msgs.values() if r.container == container)

    def purge(self, container: str) -> int:
        with self._lock:
            ids = [r.id for r in self._msgs.values() if r.container == container]
            return self._remove([Removal(container, i, Outcome.PURGED) for i in ids])

    def destinations(self) -> list[str]:
        with self._lock:
            names = {r.container for r in self._msgs.values()}
            names |= {k.container for k in self._subs}
            return sorted(names)

    def add_subscription(
        self,
        key: SubscriptionKey,
        *,
        selector: str | None = None,
        sub_dest: str | None = None,
        retroactive: bool = False,
    ) -> Subscription:
        with self._lock:
            self._count("add_subscription")
            sub = self._subs.get(key)
            if sub is None:
                last = 0 if retroactive else self._next_id - 1
                sub = Subscription(key, selector, sub_dest, last)
                self._subs[key] = sub
                self._acked[key] = dict.fromkeys(range(10) if self._prioritized else (0,), last)
            return sub

    def get_subscription(self, key: SubscriptionKey) -> Subscription | None:
        with self._lock:
            return self._subs.get(key)

    def subscriptions(self, container: str | None = None) -> list[Subscription]:
        with self._lock:
            return [s for s in self._subs.values() if container in (None, s.container)]

    def delete_subscription(self, key: SubscriptionKey) -> None:
        with self._lock:
            self._count("delete_subscription")
            self._subs.pop(key, None)
            self._acked.pop(key, None)
            self._cleanup()

    def _ack(self, acks: Sequence[Ack]) -> None:
        for a in acks:
            sub = self._subs.get(a.key)
            if sub is None:
                continue
            marks = self._acked[a.key]
            if a.message_id > marks.get(a.priority, sub.last_acked_id):
                marks[a.priority] = a.message_id
                least = min(marks.values())
                self._subs[a.key] = Subscription(a.key, sub.selector, sub.sub_dest, least)

    def _unacked(self, key: SubscriptionKey, row: StoredMessage) -> bool:
        """Whether the subscription has not acknowledged ``row`` (at its priority)."""
        return row.id > self._acked[key].get(row.priority, self._subs[key].last_acked_id)

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        with self._lock:
            self._count("acknowledge")
            self._ack(acks)

    def page_subscription(
        self, key: SubscriptionKey, after: Cursor | None, limit: int, max_bytes: int | None = None
    ) -> list[StoredMessage]:
        with self._lock:
            self._count("page_subscription")
            sub = self._subs.get(key)
            if sub is None:
                return []
            rows = [
                r for r in self._msgs.values()
                if r.container == key.container and self._unacked(key, r)
            ]  # fmt: skip
            if after is not None:
                mark = _order(after.priority, after.id)
                rows = [r for r in rows if _order(r.priority, r.id) > mark]
            rows.sort(key=lambda r: _order(r.priority, r.id))
            return within_bytes(rows[:limit], max_bytes)

    def pending_count(self, key: SubscriptionKey) -> int:
        with self._lock:
            sub = self._subs.get(key)
            if sub is None:
                return 0
            return sum(
                1 for r in self._msgs.values()
                if r.container == key.container and self._unacked(key, r)
            )  # fmt: skip

    def xa_prepare(self, xid: Xid, batch: Batch) -> list[int]:
        with self._lock:
            self._xa[xid] = batch
            return []

    def xa_commit(self, xid: Xid) -> None:
        with self._lock:
            batch = self._xa.pop(xid)
        self.commit(batch)

    def xa_rollback(self, xid: Xid) -> None:
        with self._lock:
            self._xa.pop(xid, None)

    def xa_recover(self) -> list[PreparedTransaction]:
        return []

    def _cleanup(self) -> int:
        doomed = []
        for r in self._msgs.values():
            if not r.container.startswith("topic://"):
                continue
            subs = [s for s in self._subs.values() if s.container == r.container]
            if not any(self._unacked(s.key, r) for s in subs):
                doomed.append(r.id)
        for ident in doomed:
            row = self._msgs.pop(ident)
            self._keys.discard((row.container, row.msgid_prod or "", row.msgid_seq or 0))
        return len(doomed)

    def cleanup(self) -> int:
        with self._lock:
            self._count("cleanup")
            return self._cleanup()

    def expire(
        self,
        now_ms: int,
        limit: int,
        *,
        remove: bool = True,
        max_bytes: int | None = EXPIRE_MAX_BYTES,
    ) -> list[StoredMessage]:
        with self._lock:
            self._count("expire")
            rows = sorted(
                (r for r in self._msgs.values() if 0 < r.expiration < now_ms),
                key=lambda r: (r.expiration, r.id),
            )
            rows = within_bytes(rows[:limit], max_bytes)
            if remove:
                self._remove([Removal(r.container, r.id, Outcome.EXPIRED) for r in rows])
            return rows

    def stats(self) -> StoreStats:
        with self._lock:
            depths: dict[str, int] = {}
            for r in self._msgs.values():
                depths[r.container] = depths.get(r.container, 0) + 1
            backlog = {k: self.pending_count(k) for k in self._subs}
            selectors = {k: s.selector for k, s in self._subs.items()}
            return StoreStats(depths, backlog, {"messages": float(len(self._msgs))}, selectors)
