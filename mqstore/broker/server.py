"""The STOMP broker: owns destinations and durable subscriptions, and hosts a
:class:`~mqstore.store.port.Store`; its listener (:mod:`~mqstore.broker.listener`), dead
letters (:mod:`~mqstore.broker.dead_letters`) and periodic jobs
(:mod:`~mqstore.broker.maintenance`) are mixed in.

Usage::

    broker = Broker(store, BrokerConfig(...))   # the store is started by the caller
    await broker.start("0.0.0.0", 61613)         # returns once listening; broker.port
    ...
    await broker.stop()                           # graceful; then the caller stops the store
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from mqstore.broker.config import BrokerConfig
from mqstore.broker.dead_letters import DeadLetters
from mqstore.broker.durable import DurableSub, selector_way_out
from mqstore.broker.flow import StoreUsage
from mqstore.broker.frames import encode_frame
from mqstore.broker.listener import Listener
from mqstore.broker.maintenance import Maintenance, every
from mqstore.broker.messages import BrokerMessage, UnrenderableError, stomp_name
from mqstore.broker.metrics import BrokerMetrics
from mqstore.broker.paging import MemoryBudget
from mqstore.broker.protocol import Connection, ProtocolError
from mqstore.broker.queue_volatile import NonPersistentMemory
from mqstore.broker.queues import Queue
from mqstore.broker.subscriptions import Consumer, Dispatcher
from mqstore.broker.topics import Topic
from mqstore.broker.writer import Done, Op, StoreWriter
from mqstore.errors import StoreError
from mqstore.store.model import StoredMessage, SubscriptionKey
from mqstore.store.port import Store

log = logging.getLogger(__name__)

Destination = Dispatcher


class Broker(Listener, DeadLetters, Maintenance):
    """A STOMP 1.0/1.1/1.2 broker with ActiveMQ's conventions, persisting through ``store``."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self._init_listener()
        self._init_dead_letters()
        self._init_maintenance()
        self.client_ids: dict[str, Connection] = {}
        self.node = f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000)}"
        self.usage = StoreUsage(self.config.store_usage_limit)
        #: the bytes all memory windows hold together (queues and durable subscriptions)
        self.memory = MemoryBudget(self.config.memory_limit)
        #: the bytes of all queues' non-persistent messages (only memory holds them)
        self.non_persistent = NonPersistentMemory(self.config.memory_limit)
        self.metrics = BrokerMetrics(self)
        self._writer: StoreWriter | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._seq = itertools.count(1)
        self._first_stored: int | None = None  # the lowest message ID this broker stored
        #: store IDs whose MSG does not decode (reported once, left in the store)
        self._unreadable: set[int] = set()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Load destinations and durable subscriptions, then listen on ``host:port``."""
        self.usage = StoreUsage(self.config.store_usage_limit)
        self.store.new_producers(f"ID:{self.node}-")  # each connection's ProducerId
        self._writer = StoreWriter(self.store, self.config.max_batch)
        self._writer.start()
        await self._load()
        await self._listen(host, port)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(every(self.config.expiry_interval, self.sweep_expired))]
        if self.config.destination_gc_after > 0:  # 0 disables it
            sweep = every(self.config.destination_gc_after / 2, self.forget_idle)
            self._tasks.append(loop.create_task(sweep))
        if self.config.cleanup_interval > 0:  # 0 disables it
            cleanup = every(self.config.cleanup_interval, self._cleanup)
            self._tasks.append(loop.create_task(cleanup))
        if self.config.metrics_port is not None:
            self.metrics.serve(self.config.metrics_host, self.config.metrics_port)
        over = " (TLS)" if self.config.tls is not None else ""
        log.info("STOMP broker listening on %s:%d%s", host, self.port, over)

    async def _load(self) -> None:
        store = self.store
        containers = await asyncio.to_thread(store.destinations)
        # Every depth and backlog in one read (PostgreSQL: one grouped count of each), not a
        # count per destination: start-up takes about as long with 20,000 queues as with 20.
        # Each is what ``count`` and ``pending_count`` say (XA-prepared rows left out; the
        # journaled store's window counted in); a destination with none is not listed.
        counts = await asyncio.to_thread(store.stats)
        for c in containers:
            if c.startswith("queue://"):
                depth = counts.destinations.get(c, 0)
                self.queues[c] = Queue(self, c, depth=depth, loaded=depth == 0)
            elif c.startswith("topic://"):
                self.topic(c)
        for sub in await asyncio.to_thread(store.subscriptions):
            backlog = counts.subscriptions.get(sub.key)
            if backlog is None:  # created since the counts were read
                backlog = await asyncio.to_thread(store.pending_count, sub.key)
            topic = self.topic(sub.container)
            durable = DurableSub(topic, sub.key, sub.last_acked_id, backlog, sub.selector)
            topic.durables[sub.key] = durable
            if sub.selector is not None:
                log.warning(
                    "durable subscription %r of client %r on %s has the message selector %r, "
                    "which this broker does not evaluate: a SUBSCRIBE that resumes it is "
                    "refused; its %d stored message(s) are kept (%s)",
                    sub.key.sub_name, sub.key.client_id, sub.container, sub.selector, backlog,
                    selector_way_out(stomp_name(sub.container), sub.key.sub_name),
                )  # fmt: skip

    async def stop(self) -> None:
        """Stop accepting, let connections finish in-flight work, close them, flush the store."""
        self._stop_accepting()
        for task in self._tasks:
            task.cancel()
        gates = [t.gate for t in self.topics.values()] + [q.gate for q in self.queues.values()]
        for gate in gates:
            gate.open()  # producers held back by flow control see they are closing
        self.usage.gate.wake()  # so do those waiting for store space (it stays as full)
        await self._close_connections()
        if self._writer is not None:
            await self._writer.close()
        self.metrics.close()
        await self._closed()
        log.info("STOMP broker stopped")

    # -- services for destinations and connections ------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def writer_submit(self, op: Op, done: Done | None) -> asyncio.Future[list[int]]:
        """Queue store work; ``done(ids, exc)`` runs on the loop once it is durable (or failed)."""
        assert self._writer is not None, "broker not started"
        op.done = self._noting_removals(op.removes, done) if op.removes else done
        return self._writer.submit(op)

    def submit(
        self,
        op: Op,
        finish: Callable[[], None],
        failed: Callable[[], None] | None = None,
    ) -> asyncio.Future[list[int]]:
        """Queue store work; ``finish()`` runs once it is durable, ``failed()`` if it failed
        (the failure is logged)."""

        def done(ids: list[int] | None, exc: BaseException | None) -> None:
            if exc is not None:
                log.error("store write failed: %s", exc)
                if failed is not None:
                    failed()
                return
            finish()

        return self.writer_submit(op, done)

    def must_store(self, container: str) -> bool:
        """Persistent messages go through the store for queues, and for topics with durables."""
        if container.startswith("topic://"):
            topic = self.topics.get(container)
            return topic is not None and topic.needs_store
        return True

    def stored(self, msg: BrokerMessage, ident: int) -> None:
        msg.store_id = ident
        msg.store_priority = msg.priority if self.store.prioritized else 0
        if self._first_stored is None or ident < self._first_stored:
            self._first_stored = ident

    def counts_in_usage(self, msg: BrokerMessage) -> bool:
        """Whether ``msg``'s bytes are in the store usage: every message this broker stores
        is counted, so a stored message counts, also a copy read back by a page, when its ID
        is one this broker was given."""
        first = self._first_stored
        return msg.store_id is not None and first is not None and msg.store_id >= first

    def route(self, msg: BrokerMessage) -> None:
        """Hand a (stored if need be) message to its destination."""
        if msg.container.startswith("topic://"):
            self.topic(msg.container).publish(msg)
        else:
            self.queue(msg.container).enqueue(msg)

    def queue(self, container: str) -> Queue:
        q = self.queues.get(container)
        if q is None:
            q = self.queues[container] = Queue(self, container, loaded=True)
        return q

    def topic(self, container: str) -> Topic:
        t = self.topics.get(container)
        if t is None:
            t = self.topics[container] = Topic(self, container)
        return t

    def read_row(self, row: StoredMessage, seq: int, where: str) -> BrokerMessage | None:
        """The message a stored row holds, or None when its MSG does not decode: the row
        stays in the store, nothing can deliver or dead-letter it (logged once per row)."""
        try:
            return BrokerMessage.from_row(row, seq)
        except UnrenderableError as exc:
            if row.id not in self._unreadable:
                self._unreadable.add(row.id)
                log.error("%s: %s; left in the store, not delivered", where, exc)
            return None

    async def wait_room(self, consumer: Consumer) -> None:
        await consumer.conn.wait_room()  # type: ignore[attr-defined]

    def browse_end(self, consumer: Consumer) -> None:
        headers = [
            ("subscription", consumer.sub_id),
            ("destination", stomp_name(consumer.container)),
            ("message-id", "BrowserDone"),
            ("browser", "end"),
        ]
        conn = consumer.conn
        conn.send_message(encode_frame("MESSAGE", headers, b"", conn.version))

    def metrics_changed(self) -> None:
        """Hook for gauges that are not computed at scrape time (none yet)."""

    def claim_client_id(self, client_id: str, conn: object) -> bool:
        holder = self.client_ids.get(client_id)
        if holder is not None and holder is not conn and not holder.closing:
            return False
        assert isinstance(conn, Connection)
        self.client_ids[client_id] = conn
        return True

    def connection_closed(self, conn: Connection) -> None:
        if conn.client_id and self.client_ids.get(conn.client_id) is conn:
            del self.client_ids[conn.client_id]

    # -- subscriptions ------------------------------------------------------------------------
    async def subscribe(
        self, consumer: Consumer, durable: str | None, client_id: str | None
    ) -> None:
        """Attach a consumer (creating the durable subscription in the store when new)."""
        container = consumer.container
        if container.startswith("queue://"):
            self.queue(container).add_consumer(consumer)
            return
        topic = self.topic(container)
        if durable is None or client_id is None:
            topic.add_consumer(consumer)
            return
        key = SubscriptionKey(container, client_id, durable)
        sub = topic.durables.get(key)
        if sub is None:
            await self._delete_moved_durable(key)
            row = await asyncio.to_thread(self.store.add_subscription, key)
            sub = topic.durables.get(key)
            if sub is None:
                sub = DurableSub(topic, key, row.last_acked_id, 0, row.selector)
                topic.durables[key] = sub
        refusal = sub.selector_refusal(f"SUBSCRIBE to {stomp_name(container)} refused")
        if refusal is not None:
            raise ProtocolError(refusal)
        if not await self.wait_detached(sub):
            raise ProtocolError(
                f"durable subscription {durable!r} of client {client_id!r} already has an "
                f"active subscriber{_held_by(sub)}"
            )
        if topic.durables.get(key) is not sub:  # deleted while the old subscriber left
            await self.subscribe(consumer, durable, client_id)
            return
        sub.attach(consumer)

    async def wait_detached(self, sub: DurableSub) -> bool:
        """Whether ``sub`` has no subscriber, once a closing connection that holds it (the
        client's previous one, still storing its last sends) detached it: waited for at most
        as long as that connection's cleanup waits for its sends (``stop_timeout``)."""
        holder = _closing_holder(sub)
        if holder is not None:
            log.info(
                "durable subscription %s waits for the previous connection %s of its client "
                "to close", sub.key, holder.peer,
            )  # fmt: skip
            try:
                async with asyncio.timeout(self.config.stop_timeout + 1.0):
                    await holder.detached.wait()
            except TimeoutError:
                pass
        return not sub.active

    async def _delete_moved_durable(self, key: SubscriptionKey) -> None:
        """A client's durable subscription name names one subscription, whatever its topic
        (as ActiveMQ): subscribing it to another topic deletes the old topic's one, which
        would otherwise keep its messages stored for ever; refused while that one has an
        active subscriber."""
        for topic in list(self.topics.values()):
            if topic.container == key.container:
                continue
            for old, sub in list(topic.durables.items()):
                if (old.client_id, old.sub_name) != (key.client_id, key.sub_name):
                    continue
                doing = (
                    f"SUBSCRIBE to {stomp_name(key.container)} refused (it would move the "
                    f"subscription there, deleting the one on {old.container})"
                )
                refusal = sub.selector_refusal(doing)
                if refusal is not None:
                    raise ProtocolError(refusal)
                if not await self.wait_detached(sub):
                    raise ProtocolError(
                        f"durable subscription {key.sub_name!r} of client {key.client_id!r} "
                        f"is in use on {old.container}{_held_by(sub)}: unsubscribe it there "
                        "first, or use another subscription name"
                    )
                if topic.durables.get(old) is not sub:
                    continue  # deleted meanwhile
                log.info(
                    "durable subscription %r of client %r moves from %s to %s: the old one "
                    "is deleted", key.sub_name, key.client_id, old.container, key.container,
                )  # fmt: skip
                await self.delete_durable(old.container, key.client_id, key.sub_name)

    def durable_topics(self, client_id: str, name: str) -> list[str]:
        """The topics where ``client_id`` has a durable subscription named ``name`` (one,
        unless ActiveMQ stored it on several)."""
        return sorted(
            topic.container
            for topic in self.topics.values()
            if SubscriptionKey(topic.container, client_id, name) in topic.durables
        )

    def unsubscribe(self, consumer: Consumer) -> None:
        """Detach a consumer; unacknowledged messages go back."""
        if consumer.dest is not None:
            consumer.dest.remove_consumer(consumer)
        consumer.closed = True

    async def delete_durable(self, container: str, client_id: str, name: str) -> None:
        """UNSUBSCRIBE with ``activemq.subscriptionName``: delete the durable subscription."""
        topic = self.topic(container)
        key = SubscriptionKey(container, client_id, name)
        sub = topic.durables.pop(key, None)
        if sub is not None and sub.consumer is not None:
            sub.remove_consumer(sub.consumer)
        try:
            await asyncio.to_thread(self.store.delete_subscription, key)
        except StoreError as exc:
            log.info("deleting durable subscription %s: %s", key, exc)
        topic.release_usage()

    # -- stats ------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Plain-dict figures: destinations, depths, consumers, durable subscriptions, usage."""
        dests: dict[str, dict[str, int]] = {}
        for name, q in list(self.queues.items()):
            dests[name] = q.stats()
        for name, t in list(self.topics.items()):
            dests[name] = t.stats()
        durables = [
            {
                "destination": key.container,
                "client_id": key.client_id,
                "subscription": key.sub_name,
                "active": sub.active,
                "backlog": sub.backlog,
                "in_memory": len(sub.pending),
                "in_memory_bytes": sub.window.bytes,
            }
            for t in list(self.topics.values())
            for key, sub in list(t.durables.items())
        ]
        writer = self._writer
        return {
            "broker": self.config.broker_name,
            "port": self.port,
            "connections": len(self.connections),
            "refused_connections": self.refused_connections,
            "destinations": dests,
            "durable_subscriptions": durables,
            "store_usage": {
                "used": self.usage.used,
                "limit": self.usage.limit,
                "blocked_producers": self.usage.blocked,
                "refused_sends": self.usage.gate.refused,
            },
            "memory": {"used": self.memory.used, "limit": self.memory.limit},
            "store_writer": {
                "batches": writer.batches if writer else 0,
                "inline_batches": writer.inline_batches if writer else 0,
                "ops": writer.ops if writer else 0,
                "backlog": writer.backlog if writer else 0,
            },
        }


def _closing_holder(sub: DurableSub) -> Connection | None:
    """The connection holding ``sub``'s subscriber, if it is closing (not yet detached)."""
    holder = sub.consumer.conn if sub.consumer is not None else None
    return holder if isinstance(holder, Connection) and holder.closing else None


def _held_by(sub: DurableSub) -> str:
    """Why a durable subscription is still in use when its holder is a closing connection."""
    holder = _closing_holder(sub)
    if holder is not None:
        return (
            f" (the client's previous connection {holder.peer} is closing but still storing "
            "its last sends; subscribe again later)"
        )
    return ""
