"""A durable topic subscription: pending messages paged from the store after LAST_ACKED_ID.

While a subscriber is attached, a bounded window of its backlog is in memory
(``memory_window`` messages, ``memory_window_bytes`` bytes); the rest is read with
``store.page_subscription`` as it drains.

Acks advance LAST_ACKED_ID (per PRIORITY column value as the store's pages give it: 0 for
every row of a store without prioritizedMessages, which pages in ID order) to the highest
acknowledged ID below every message of that priority not yet acknowledged: delivered,
waiting in memory, or not yet read from the store in this session. Individual acks out of
order, across reconnects, never skip a message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from mqstore.broker.by_priority import IdsByPriority
from mqstore.broker.messages import BrokerMessage, UnrenderableError, stomp_name
from mqstore.broker.paging import LeftToPage, Window
from mqstore.broker.subscriptions import Consumer, Delivery, delivery_order
from mqstore.broker.unrenderable_log import UnrenderableLog
from mqstore.broker.writer import Op
from mqstore.store.model import Ack, Cursor, Outcome, SubscriptionKey

if TYPE_CHECKING:
    from mqstore.broker.topics import Topic

log = logging.getLogger(__name__)


def selector_way_out(destination: str, sub_name: str) -> str:
    """What a client can do with durable subscription ``sub_name`` of topic ``destination``
    (its STOMP name) that ActiveMQ stored with a selector, which this broker never resumes:
    a clause that ends every refusal of one."""
    return (
        "consume it with ActiveMQ, or delete it (UNSUBSCRIBE with destination "
        f"{destination} and activemq.subscriptionName {sub_name!r}; its stored messages go "
        "with it) and subscribe again without a selector"
    )


class DurableSub:
    """One durable subscription (client id + subscription name on a topic)."""

    def __init__(
        self,
        topic: Topic,
        key: SubscriptionKey,
        last_acked: int,
        backlog: int,
        selector: str | None = None,
    ) -> None:
        self.topic = topic
        self.key = key
        self._unrenderable_log = UnrenderableLog(f"durable subscription {key}")
        #: the SELECTOR column (ActiveMQ made it): not evaluated here, so never resumed
        self.selector = selector
        self.container = key.container
        self.consumer: Consumer | None = None
        self.pending: deque[BrokerMessage] = deque()
        self.tracked: set[int] = set()
        self.cursor: Cursor | None = None
        self.exhausted = False
        self.unacked: dict[int, int] = {}  # id -> PRIORITY column
        self.waiting = IdsByPriority()  # stored, pending or unacked: LAST_ACKED_ID stays below
        self.acked_pending = IdsByPriority()  # acked, LAST_ACKED_ID not yet past them
        self.base_acked = last_acked
        self.last_acked: dict[int, int] = {}  # LAST_ACKED_ID per priority, as written
        self._confirmed: dict[int, int] = {}  # ... and as the store confirmed it
        self.backlog = backlog
        #: sent, not acked (or its ack failed to reach the store): the redelivery counter
        #: it is sent again with, ``redelivered:true`` (kept in memory: the row is shared
        #: by every subscription of the topic)
        self.delivered: dict[int, int] = {}
        #: sent in this session and not settled: its place in the order of first sending (a
        #: message put back goes in this order, whatever the order its settlement failed in)
        self.sent: dict[int, int] = {}
        self._sends = 0
        #: Bytes of non-persistent messages waiting in ``pending`` (only memory holds them,
        #: so the topic's producers wait while this passes the high-water mark).
        self.volatile_bytes = 0
        self._paging = False
        self._left = LeftToPage()
        #: The stored messages in ``pending``, counted against the memory window.
        cfg = topic.broker.config
        self.window = Window(cfg.memory_window, cfg.memory_window_bytes, topic.broker.memory)
        self._scheduled = False
        self._session = 0  # pages read for an earlier attach are dropped

    @property
    def active(self) -> bool:
        return self.consumer is not None

    def selector_refusal(self, doing: str) -> str | None:
        """Why ``doing`` (a SUBSCRIBE) is refused when the subscription has a selector: this
        broker does not evaluate selectors, so resuming it would deliver the messages the
        selector excludes (ActiveMQ replaces it, dropping its messages; mqstore keeps them)."""
        if self.selector is None:
            return None
        key = self.key
        way_out = selector_way_out(stomp_name(key.container), key.sub_name)
        return (
            f"{doing}: durable subscription {key.sub_name!r} of client {key.client_id!r} on "
            f"{key.container} has the message selector {self.selector!r} (ActiveMQ stored "
            "it), and this broker does not evaluate selectors: it would deliver the "
            "messages the selector excludes. Its stored messages stay stored. "
            f"{way_out[:1].upper()}{way_out[1:]}"
        )

    def acked_upto(self, prio: int) -> int:
        """LAST_ACKED_ID of the ``prio`` row: every message of it up to there is acked."""
        return self.last_acked.get(prio, self.base_acked)

    def _read(self, prio: int, ident: int) -> bool:
        """Whether the message at (``prio``, ``ident``) was read into this session."""
        at = (-prio, ident)
        if self._left.earliest is not None and at >= self._left.earliest:
            return False
        if self.exhausted:
            return True
        return self.cursor is not None and at <= (-self.cursor.priority, self.cursor.id)

    # -- consumer ---------------------------------------------------------------------------
    def attach(self, consumer: Consumer) -> None:
        """A subscriber (re)connected: resume from the store after LAST_ACKED_ID."""
        self.consumer = consumer
        consumer.dest = self
        consumer.durable = self
        self.pending.clear()
        self.volatile_bytes = 0
        self.window.clear()
        self.tracked = set(self.acked_pending)
        self.unacked.clear()
        self.waiting.clear()
        self.sent.clear()
        self.cursor = None
        self.exhausted = False
        self._left.earliest = None
        self._session += 1
        self.kick()

    def remove_consumer(self, consumer: Consumer) -> None:
        """The subscriber went away; unacked messages are re-read from the store later
        (counted as a redelivery unless the store refused its connection)."""
        consumer.closed = True
        for d in list(consumer.in_flight.values()):
            consumer.settle(d)
            self._uncounted(d)
        if self.consumer is consumer:
            self.consumer = None
            self.pending.clear()
            self.volatile_bytes = 0
            self.window.clear()
            self.topic.subscriber_drained()
            self.unacked.clear()
            self.waiting.clear()
            self.sent.clear()
        self.topic.broker.metrics_changed()

    # -- arrivals ---------------------------------------------------------------------------
    def offer(self, msg: BrokerMessage) -> None:
        """A message published on the topic."""
        if msg.store_id is not None:
            self.backlog += 1
            self.window.seen(msg)
        if self.consumer is None:
            return
        if msg.store_id is None:
            self.pending.append(msg)
            self.volatile_bytes += msg.size
        elif msg.store_id in self.tracked:
            return  # a page read it before its store call came back
        elif self.exhausted:
            if self.window.full(len(self.pending)):
                self.exhausted = False
                self._left.skip(msg)
                return
            self._take(msg)
        elif self.cursor is not None and (-msg.store_priority, msg.store_id) < (
            -self.cursor.priority,
            self.cursor.id,
        ):
            self._take(msg)
        else:
            self._left.skip(msg)
        self.kick()

    def _take(self, msg: BrokerMessage) -> None:
        """A stored message enters the in-memory window, to be delivered."""
        assert msg.store_id is not None
        self.tracked.add(msg.store_id)
        self.waiting.add(msg.store_id, msg.store_priority)
        self.pending.append(msg)
        self.window.add(msg)

    # -- dispatch ---------------------------------------------------------------------------
    def kick(self) -> None:
        """Schedule a dispatch pass (coalesced)."""
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._scheduled = False
        consumer = self.consumer
        if consumer is None:
            return
        now = int(time.time() * 1000)
        auto: list[BrokerMessage] = []
        expired: list[BrokerMessage] = []
        while self.pending and consumer.credit() > 0:
            msg = self.pending.popleft()
            if msg.store_id is None:
                self.volatile_bytes -= msg.size
            if msg.store_id is not None:
                self.window.remove(msg)
                self.unacked[msg.store_id] = msg.store_priority
                self.waiting.add(msg.store_id, msg.store_priority)
                self.delivered[msg.store_id] = msg.redelivery_counter + 1
                self._sends += 1
                self.sent.setdefault(msg.store_id, self._sends)  # a redelivery keeps its place
            if msg.expired(now):
                expired.append(msg)
                continue
            try:
                delivery = consumer.deliver(msg)
            except UnrenderableError as exc:  # malformed body: the DLQ, as a poison message
                self._unrenderable_log.report(exc, "moved to the DLQ")
                self.topic.broker.dead_letter(self, [msg], Outcome.DEAD_LETTERED)
                continue
            if delivery is None:
                auto.append(msg)
        if auto:
            self._submit_settle(auto, delivered=True)
        if expired:
            self._submit_settle(expired, delivered=False)
        self.topic.subscriber_drained()
        count = len(self.pending)
        if not self.exhausted and not self._paging and self.window.wants_page(count):
            self._paging = True
            window = self.window
            asyncio.get_running_loop().create_task(
                self._page(window.page_rows(count), window.page_bytes())
            )

    async def _page(self, limit: int, max_bytes: int) -> None:
        broker = self.topic.broker
        policy = broker.config.redelivery
        key = self.key
        where = f"durable subscription {key.client_id}/{key.sub_name} of {key.container}"
        try:
            skipped, session = self._left.count, self._session
            self.cursor = self._left.rewind(self.cursor)
            rows = await asyncio.to_thread(
                broker.store.page_subscription, self.key, self.cursor, max(limit, 1), max_bytes
            )
            if self.consumer is None:
                return
            if session != self._session:
                rows = []  # read for a session that has ended: its attach starts over
            if rows:
                self.window.read(max(len(row.msg) for row in rows))
            full = False
            for row in rows:
                if row.id in self.tracked or row.id <= self.acked_upto(row.priority):
                    self.cursor = row.cursor
                    continue
                if self.window.over():
                    full = True  # this row and the rest wait in the store for a later page
                    break
                self.cursor = row.cursor
                msg = broker.read_row(row, 0, where)
                if msg is None:
                    continue
                counter = self.delivered.get(row.id, 0)
                if counter > msg.ow.redelivery_counter:
                    msg.ow = msg.ow.replace(redelivery_counter=counter)
                if row.id in self.delivered:  # sent before, not acked (or its ack failed)
                    msg.delivered_before = True
                if policy.exceeded(counter):  # left unacknowledged too often: poison
                    self.tracked.add(row.id)
                    broker.dead_letter(self, [msg], Outcome.DEAD_LETTERED)
                    continue
                self._take(msg)
            self.cursor = self._left.rewind(self.cursor)  # skipped while the page was read
            if (
                session == self._session
                and not full
                and len(rows) < limit
                and sum(len(row.msg) for row in rows) < max_bytes
                and self._left.count == skipped
            ):
                self.exhausted = True
        except Exception:
            log.exception("paging durable subscription %s failed", self.key)
            await asyncio.sleep(1.0)
        finally:
            self._paging = False
        self.kick()

    # -- settlement -------------------------------------------------------------------------
    def _submit_settle(self, msgs: list[BrokerMessage], *, delivered: bool) -> None:
        op, finish = self.settle_work(msgs)
        self.topic.broker.submit(
            op, finish, failed=lambda: self.unsettled(msgs, delivered=delivered)
        )

    def settle_work(
        self, msgs: list[BrokerMessage], outcome: Outcome = Outcome.ACKNOWLEDGED
    ) -> tuple[Op, Callable[[], None]]:
        """Advance LAST_ACKED_ID past ``msgs`` where no earlier message is still unacked."""
        stored = [m for m in msgs if m.store_id is not None]
        for m in stored:
            assert m.store_id is not None
            self.unacked.pop(m.store_id, None)
            self.waiting.discard(m.store_id)
            self.acked_pending.add(m.store_id, m.store_priority)
            self.delivered.pop(m.store_id, None)
        op = Op()
        for prio in self.acked_pending.priorities():
            # The acked ids below the lowest waiting one that this session has read: a
            # prefix of the acked ids in order, since both conditions are.
            low = self.waiting.lowest(prio)
            mark = None
            while (i := self.acked_pending.lowest(prio)) is not None:
                if (low is not None and i >= low) or not self._read(prio, i):
                    break
                mark = i
                self.acked_pending.discard(i)
                self.tracked.discard(i)
            if mark is not None and mark > self.acked_upto(prio):
                self.last_acked[prio] = mark
                op.acks.append(Ack(self.key, mark, prio))

        marks = [(a.priority, a.message_id) for a in op.acks]

        def finish() -> None:
            for m in stored:
                assert m.store_id is not None
                self.sent.pop(m.store_id, None)
            for prio, mark in marks:
                self._confirmed[prio] = max(self._confirmed.get(prio, mark), mark)
                self.last_acked[prio] = max(self.acked_upto(prio), mark)
            self.backlog = max(0, self.backlog - len(stored))
            self.topic.dequeued += len(msgs)
            self.topic.release_usage()
            self.kick()

        return op, finish

    def forget(self, ids: set[int]) -> None:
        """These stored messages left the store without an ack of this subscription (the
        expiry sweep removed them): their redelivery counters go, as nothing delivers them
        again."""
        for ident in ids:
            self.delivered.pop(ident, None)
            self.sent.pop(ident, None)

    def removed(self, msgs: list[BrokerMessage]) -> None:
        """Nothing to do: :meth:`settle_work` already moved LAST_ACKED_ID."""

    def unsettled(self, msgs: list[BrokerMessage], *, delivered: bool) -> None:
        """An ack or NACK did not reach the store: LAST_ACKED_ID goes back to what the store
        confirmed, and the messages are delivered again (acks of others that went with the
        failed write are forgotten: those messages may come again, never go missing); those
        ``delivered`` before, marked redelivered (also when read again by a later attach),
        their redelivery counters unchanged."""
        self.last_acked = {p: max(v, self.base_acked) for p, v in self._confirmed.items()}
        stored = [m for m in msgs if m.store_id is not None]
        if delivered:
            stored = [m.marked_redelivered() for m in stored]
        for m in stored:
            assert m.store_id is not None
            self.acked_pending.discard(m.store_id)
            if delivered:
                counter = max(self.delivered.get(m.store_id, 0), m.redelivery_counter)
                self.delivered[m.store_id] = counter
        if self.consumer is None:
            return  # the next attach reads the subscription from the store again
        for m in stored:
            assert m.store_id is not None
            self.tracked.add(m.store_id)
            self.waiting.add(m.store_id, m.store_priority)
            self.window.add(m)
        # In the order they were sent, among those already put back ahead of the rest.
        back = list(stored)
        while self.pending and self.pending[0].store_id in self.sent:
            back.append(self.pending.popleft())
        back.sort(key=lambda m: self.sent.get(m.store_id or 0, 0))
        self.pending.extendleft(reversed(back))
        self.kick()

    def _uncounted(self, d: Delivery) -> bool:
        """Whether ``d``'s connection was closed by the store's refusal: then its message
        comes again with the redelivery counter it was sent with (marked redelivered)."""
        if not d.consumer.conn.store_refused:
            return False
        if d.msg.store_id is not None:
            self.delivered[d.msg.store_id] = d.msg.redelivery_counter
        return True

    def give_back(self, deliveries: list[Delivery]) -> None:
        """Aborted acks: the subscriber gets the messages again, in the order they were first
        delivered whatever the order of the acks (or the DLQ past the limit)."""
        policy = self.topic.broker.config.redelivery
        poison: list[BrokerMessage] = []
        for d in sorted(deliveries, key=delivery_order, reverse=True):
            d.consumer.settle(d)
            refused = self._uncounted(d)
            if d.consumer.closed or self.consumer is not d.consumer:
                continue
            copy = d.msg.marked_redelivered() if refused else d.msg.with_redelivery()
            if not refused and policy.exceeded(copy.redelivery_counter):
                poison.append(copy)
            else:
                self.pending.appendleft(copy)
                if copy.store_id is None:
                    self.volatile_bytes += copy.size
                else:
                    self.window.add(copy)
        if poison:
            self.topic.broker.dead_letter(self, poison, Outcome.DEAD_LETTERED)
        self.kick()
