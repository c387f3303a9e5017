"""A queue: each message to one consumer, round-robin, priority order, paged from the store.

Only a bounded window of a backlog is in memory (``memory_window`` messages,
``memory_window_bytes`` bytes); the rest is read with ``store.page`` (keyset cursor in
delivery order) as consumers drain the window. ``tracked`` holds the IDs
the queue has in memory, in flight or being removed, so a page never yields them twice;
``gone`` the IDs removed while a page is being read, which that page may still hold.

A stored message counts against the window's bytes (and the broker's memory budget) from
the moment it is in memory until it leaves it: waiting, in flight to a consumer (also once
acknowledged in an open transaction), waiting for its redelivery delay, or consumed and
waiting for the store to remove it. Those waiting and those being removed also count
against ``memory_window`` messages, so paging waits for a slow store instead of piling up
consumed messages; deliveries in flight count by their bytes only (a consumer's prefetch
bounds their number). Returned deliveries go back in line, and the window is trimmed back
to its bounds by leaving the last messages never delivered to the store for a later page.

Non-persistent messages are only in memory, from their SEND until acknowledged: their
bytes are counted, and past ``queue_high_water`` producers of non-persistent messages to the
queue wait at its gate until consumers take them below ``queue_low_water``. Those of all
queues together are bounded by ``memory_limit`` too (:class:`NonPersistentMemory`): while
they come to that much, producers of non-persistent messages wait at every queue's gate.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from mqstore.broker.messages import BrokerMessage, UnrenderableError
from mqstore.broker.paging import LeftToPage, Window
from mqstore.broker.queue_volatile import VolatileHold
from mqstore.broker.subscriptions import MESSAGE_OVERHEAD, Consumer, Delivery
from mqstore.broker.unrenderable_log import UnrenderableLog
from mqstore.broker.writer import Op
from mqstore.store.model import Cursor, Outcome, Removal

if TYPE_CHECKING:
    from mqstore.broker.server import Broker

log = logging.getLogger(__name__)


#: Seconds before a message whose ACK, NACK or expiry failed to reach the store comes back.
UNSETTLED_RETRY_S = 1.0

#: A browser's store reads: at most this many rows, and no more MSG bytes than this
#: (the first row always comes), so browsing large messages holds few of them at once.
BROWSE_ROWS = 500
BROWSE_BYTES = 8 << 20


def _now_ms() -> int:
    return int(time.time() * 1000)


class Queue:
    """One queue destination (``queue://NAME``)."""

    def __init__(self, broker: Broker, container: str, *, depth: int = 0, loaded: bool) -> None:
        self.broker = broker
        self.container = container
        self.consumers: list[Consumer] = []
        self.pending: list[tuple[int, int, BrokerMessage]] = []
        self.tracked: set[int] = set()
        self.gone: set[int] = set()
        self.cursor: Cursor | None = None
        self.exhausted = loaded
        self.depth = depth
        self.enqueued = 0
        self.dequeued = 0
        self._rr = 0
        self._scheduled = False
        self._paging = False
        self._left = LeftToPage()
        #: The stored messages held in memory (see above), counted against the window.
        self.window = Window(
            broker.config.memory_window, broker.config.memory_window_bytes, broker.memory
        )
        #: IDs of the stored messages counted in ``window``.
        self.counted: set[int] = set()
        #: IDs of the stored messages consumed whose removal the store has not yet applied.
        self.settling: set[int] = set()
        #: The non-persistent messages held (only memory holds them) and their producers' gate.
        self.volatile = VolatileHold(container, broker.config, broker.non_persistent)
        self.gate = self.volatile.gate
        self._unrenderable_log = UnrenderableLog(container)

    def idle(self) -> bool:
        """Nothing to keep: no message (stored, in memory or in flight), consumer, waiting
        producer or paging in progress; a new use makes the queue again."""
        return (
            self.depth == 0
            and not self.consumers
            and not self.pending
            and not self.tracked
            and not self._paging
            and not self._scheduled
            and self.volatile_bytes == 0
            and not self.gate.closed
            and not self.gate.waiting
        )

    # -- arrivals ---------------------------------------------------------------------------
    def enqueue(self, msg: BrokerMessage) -> None:
        """A new message (stored already when persistent)."""
        self.depth += 1
        self.enqueued += 1
        if msg.store_id is not None:
            self.window.seen(msg)
            if msg.store_id in self.tracked:
                return  # a page read it before its store call came back
            if not self.exhausted and not self._before_cursor(msg):
                self._left.skip(msg)
                return  # a page will bring it in
            if self.exhausted and self.window.full(self._waiting()):
                self.exhausted = False
                self._left.skip(msg)
                return
            self.tracked.add(msg.store_id)
        else:
            self._hold(msg)
        msg.seq = self.broker.next_seq()
        self._push(msg)
        self.kick()

    def _push(self, msg: BrokerMessage) -> None:
        """Into ``pending`` (a stored message counts against the window until it leaves
        memory: see :meth:`_uncount`)."""
        self._count(msg)
        heapq.heappush(self.pending, (self._rank(msg), msg.seq, msg))

    def _count(self, msg: BrokerMessage) -> None:
        if msg.store_id is not None and msg.store_id not in self.counted:
            self.counted.add(msg.store_id)
            self.window.add(msg)

    def _uncount(self, msg: BrokerMessage) -> None:
        """A stored message left memory (consumed, dead-lettered, or left to the store)."""
        if msg.store_id is not None and msg.store_id in self.counted:
            self.counted.discard(msg.store_id)
            self.window.remove(msg)

    def _waiting(self) -> int:
        """Messages counted against ``memory_window``: those waiting for dispatch and those
        consumed whose removal the store has not yet applied."""
        return len(self.pending) + len(self.settling)

    def _hold(self, msg: BrokerMessage) -> None:
        """Count a non-persistent message (:class:`~.queue_volatile.VolatileHold`)."""
        self.volatile.hold(msg.size + MESSAGE_OVERHEAD)

    @property
    def volatile_bytes(self) -> int:
        """Bytes of the non-persistent messages held (body + MESSAGE_OVERHEAD each)."""
        return self.volatile.bytes

    def refusal(self) -> str:
        """What a producer refused at the gate is told (see :class:`~.flow.Limited`)."""
        return self.volatile.refusal()

    def _rank(self, msg: BrokerMessage) -> int:
        """Dispatch rank: JMS priority in prioritized mode; plain mode is FIFO, as ActiveMQ."""
        return -msg.priority if self.broker.store.prioritized else 0

    def _before_cursor(self, msg: BrokerMessage) -> bool:
        if self.cursor is None or msg.store_id is None:
            return False
        return (-msg.store_priority, msg.store_id) < (-self.cursor.priority, self.cursor.id)

    def _return(self, msgs: list[BrokerMessage]) -> None:
        """Put returned messages back in line (each keeps its original position), then trim
        the window back to its bounds."""
        for msg in msgs:
            self._push(msg)
        self._trim()
        self.kick()

    def _trim(self) -> None:
        """Back within the window's bounds after messages returned: the last stored messages
        in line that were never delivered leave memory (the store keeps them; a later page
        brings them back in). Only from the end of the line, so order is kept."""
        window = self.window
        if not (self._waiting() > window.max_count or window.bytes > window.max_bytes):
            return
        line = sorted(self.pending)
        dropped = 0
        while line and (
            self._waiting() - dropped > window.max_count or window.bytes > window.max_bytes
        ):
            msg = line[-1][2]
            if msg.store_id is None or msg.redelivered or len(line) == 1:
                break  # only memory holds it, or its redelivery is not yet stored
            line.pop()
            dropped += 1
            self.tracked.discard(msg.store_id)
            self._uncount(msg)
            self._left.skip(msg)
            self.exhausted = False
        if dropped:
            self.pending = line  # sorted: a heap

    # -- consumers --------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        consumer.dest = self
        if consumer.browser:
            asyncio.get_running_loop().create_task(self._browse(consumer))
        self.kick()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach; every unsettled delivery goes back, redelivered. One acked or nacked in an
        open transaction stays with it: its COMMIT consumes it, its ABORT gives it back."""
        consumer.closed = True
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.give_back([d for d in consumer.in_flight.values() if d.tx is None])

    # -- dispatch ---------------------------------------------------------------------------
    def kick(self) -> None:
        """Schedule a dispatch pass (coalesced)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _eligible(self) -> list[Consumer]:
        live = [c for c in self.consumers if not c.browser and not c.closed]
        exclusive = [c for c in live if c.exclusive]
        return exclusive[:1] if exclusive else live

    def _dispatch(self) -> None:
        self._scheduled = False
        consumers = self._eligible()
        now = _now_ms()
        auto: list[BrokerMessage] = []
        while self.pending and consumers:
            n = len(consumers)
            chosen = None
            for i in range(n):
                c = consumers[(self._rr + i) % n]
                if c.credit() > 0:
                    chosen = c
                    self._rr = (self._rr + i + 1) % n
                    break
            if chosen is None:
                break
            _, _, msg = heapq.heappop(self.pending)
            if msg.expired(now):
                self.broker.dead_letter(self, [msg], Outcome.EXPIRED)
                continue
            try:
                delivery = chosen.deliver(msg)
            except UnrenderableError as exc:
                self._unrenderable(msg, exc)
                continue
            if delivery is None:
                auto.append(msg)
        if auto:
            self.broker.submit(
                *self.settle_work(auto), failed=lambda: self.unsettled(auto, delivered=True)
            )
        self._maybe_page()

    def _unrenderable(self, msg: BrokerMessage, exc: UnrenderableError) -> None:
        """A message with a malformed body goes to the DLQ; on its DLQ it stays stored."""
        if msg.container == self.broker.config.dlq_for(msg.container):
            self._unrenderable_log.report(exc, "left in the store, not delivered")
            self._uncount(msg)
            return  # stays tracked: not paged in again before a restart
        self._unrenderable_log.report(exc, "moved to the DLQ")
        self.broker.dead_letter(self, [msg], Outcome.DEAD_LETTERED)

    def _maybe_page(self) -> None:
        count = self._waiting()
        if self.exhausted or self._paging or not self.window.wants_page(count):
            return
        if not self._eligible():
            return
        self._paging = True
        window = self.window
        asyncio.get_running_loop().create_task(
            self._page(window.page_rows(count), window.page_bytes())
        )

    async def _page(self, limit: int, max_bytes: int) -> None:
        try:
            skipped = self._left.count
            self.cursor = self._left.rewind(self.cursor)
            limit = max(limit, 1)
            rows = await asyncio.to_thread(
                self.broker.store.page, self.container, self.cursor, limit, max_bytes
            )
            if rows:
                self.window.read(max(len(row.msg) for row in rows))
            full = False
            for row in rows:
                if row.id in self.tracked or row.id in self.gone:
                    self.cursor = row.cursor
                    continue
                if self.window.over():
                    full = True  # this row and the rest wait in the store for a later page
                    break
                self.cursor = row.cursor
                msg = self.broker.read_row(row, self.broker.next_seq(), self.container)
                if msg is None:
                    continue
                self.tracked.add(row.id)
                self._push(msg)
            self.cursor = self._left.rewind(self.cursor)  # skipped while the page was read
            if (
                not full
                and len(rows) < limit
                and sum(len(row.msg) for row in rows) < max_bytes
                and self._left.count == skipped
            ):
                self.exhausted = True
        except Exception:
            log.exception("paging %s from the store failed", self.container)
            await asyncio.sleep(1.0)
        finally:
            self._paging = False
            self.gone.clear()
        self.kick()

    async def _browse(self, consumer: Consumer) -> None:
        """Send what the queue holds, then ``browser:end`` (as ActiveMQ's STOMP does)."""
        cursor: Cursor | None = None
        try:
            while not consumer.closed:
                rows = await asyncio.to_thread(
                    self.broker.store.page, self.container, cursor, BROWSE_ROWS, BROWSE_BYTES
                )
                for row in rows:
                    cursor = row.cursor
                    await self.broker.wait_room(consumer)
                    try:
                        consumer.deliver(BrokerMessage.from_row(row, 0))
                    except UnrenderableError as exc:  # a row or a body that does not decode
                        log.error("browsing %s: %s; skipped", self.container, exc)
                if len(rows) < BROWSE_ROWS and sum(len(row.msg) for row in rows) < BROWSE_BYTES:
                    break
            for _, _, msg in sorted(self.pending):
                if msg.store_id is None and not consumer.closed:
                    await self.broker.wait_room(consumer)
                    consumer.deliver(msg)
            if not consumer.closed:
                self.broker.browse_end(consumer)
        except Exception:
            log.exception("browsing %s failed", self.container)

    # -- settlement -------------------------------------------------------------------------
    def settle_work(
        self, msgs: list[BrokerMessage], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> tuple[Op, Callable[[], None]]:
        """The store work that consumes ``msgs``, and what to do once it is durable."""
        op = Op()
        for m in msgs:
            if m.store_id is not None:
                op.removes.append(Removal(self.container, m.store_id, outcome))
                if m.store_id in self.tracked:
                    self.settling.add(m.store_id)

        def finish() -> None:
            self.removed(msgs)
            self.dequeued += len(msgs)
            self.kick()

        return op, finish

    def removed(self, msgs: list[BrokerMessage]) -> None:
        """Messages left the queue for good (acked, dead-lettered, expired)."""
        freed = 0
        for m in msgs:
            self.depth -= 1
            if m.store_id is not None:
                self.tracked.discard(m.store_id)
                self.settling.discard(m.store_id)
                self._uncount(m)
                if self._paging:  # the page in flight may have read it before it went
                    self.gone.add(m.store_id)
            else:
                freed += m.size + MESSAGE_OVERHEAD
            if self.broker.counts_in_usage(m):
                self.broker.usage.release(m.size)
        if freed:
            self.volatile.release(freed)

    def drop_pending(self, store_ids: set[int]) -> list[BrokerMessage]:
        """Take the given stored messages out of line (expiry sweep); they stay counted in
        the window until their removal is applied (:meth:`removed`)."""
        keep: list[tuple[int, int, BrokerMessage]] = []
        out: list[tuple[int, int, BrokerMessage]] = []
        for entry in self.pending:
            (out if entry[2].store_id in store_ids else keep).append(entry)
        if out:
            heapq.heapify(keep)
            self.pending = keep
        return [e[2] for e in out]

    def expired_pending(self, now: int) -> list[BrokerMessage]:
        """Remove and return expired messages waiting in memory."""
        if not any(e[2].expired(now) for e in self.pending):
            return []
        keep = [e for e in self.pending if not e[2].expired(now)]
        out = [e for e in self.pending if e[2].expired(now)]
        heapq.heapify(keep)
        self.pending = keep
        return [e[2] for e in out]

    def unsettled(self, msgs: list[BrokerMessage], *, delivered: bool) -> None:
        """Messages whose consumption failed to reach the store come back, after a pause
        (the store is likely still away), unless they left the queue meanwhile; those
        ``delivered`` to a consumer before, marked redelivered."""
        for m in msgs:
            if m.store_id is not None:
                self.settling.discard(m.store_id)  # still counted: memory holds them

        def back() -> None:
            self._return(
                [
                    m.marked_redelivered() if delivered else m
                    for m in msgs
                    if m.store_id is None or m.store_id in self.tracked
                ]
            )

        asyncio.get_running_loop().call_later(UNSETTLED_RETRY_S, back)

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Unacknowledged deliveries return with redelivery counter + 1 (or go to the DLQ);
        those of a connection the store refused return as :meth:`unsettled` ones do, marked
        redelivered, uncounted."""
        policy = self.broker.config.redelivery
        poison: list[BrokerMessage] = []
        updates: list[tuple[str, int, bytes]] = []
        uncounted: list[BrokerMessage] = []
        now: list[BrokerMessage] = []
        for d in deliveries:
            d.consumer.settle(d)
            if d.consumer.conn.store_refused:
                uncounted.append(d.msg)
                continue
            copy = d.msg.with_redelivery()
            if policy.exceeded(copy.redelivery_counter):
                poison.append(copy)
                continue
            if copy.store_id is not None and copy.data is not None:
                updates.append((self.container, copy.store_id, copy.data))
            delay = policy.delay(copy.redelivery_counter)
            if delay > 0:
                asyncio.get_running_loop().call_later(delay / 1000, self._return, [copy])
            else:
                now.append(copy)
        self._return(now)
        if updates:
            self.broker.writer_submit(Op(updates=updates), None)
        if poison:
            self.broker.dead_letter(self, poison, Outcome.DEAD_LETTERED)
        if uncounted:
            self.unsettled(uncounted, delivered=True)
        self.kick()

    def stats(self) -> dict[str, int]:
        return {
            "depth": self.depth,
            "consumers": len(self.consumers),
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "in_memory": len(self.pending),
            "in_memory_bytes": self.window.bytes,
            "in_flight": sum(len(c.in_flight) for c in self.consumers),
            "settling": len(self.settling),
            "non_persistent_bytes": self.volatile_bytes,
            "blocked_producers": self.gate.waiting,
            "refused_sends": self.gate.refused,
        }
