"""The STOMP broker: listens, owns destinations, and hosts a :class:`~mqstore.store.port.Store`.

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
from dataclasses import dataclass, field
from typing import Any

from mqstore.broker.closing import close_after_output
from mqstore.broker.config import BrokerConfig
from mqstore.broker.dlq_audit import DeadLetterAudit
from mqstore.broker.durable import DurableSub, selector_way_out
from mqstore.broker.flow import StoreUsage
from mqstore.broker.frames import encode_frame
from mqstore.broker.messages import BrokerMessage, UnrenderableError, dead_letter, stomp_name
from mqstore.broker.metrics import BrokerMetrics
from mqstore.broker.paging import MemoryBudget
from mqstore.broker.protocol import Connection, ProtocolError
from mqstore.broker.queues import Queue
from mqstore.broker.subscriptions import Consumer, Dispatcher
from mqstore.broker.topics import Topic
from mqstore.broker.writer import Done, Op, StoreWriter
from mqstore.errors import DuplicateMessageError, MqstoreError, StoreError
from mqstore.store.model import Outcome, Removal, StoredMessage, SubscriptionKey
from mqstore.store.port import Store

log = logging.getLogger(__name__)

#: Seconds a TLS client has to finish its handshake before the connection is dropped.
TLS_HANDSHAKE_S = 10.0

Destination = Dispatcher


class Broker:
    """A STOMP 1.0/1.1/1.2 broker with ActiveMQ's conventions, persisting through ``store``."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig()
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.connections: set[Connection] = set()
        self.refused_connections = 0  # turned away past max_connections
        self.client_ids: dict[str, Connection] = {}
        self.port = 0
        self.node = f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000)}"
        self.usage = StoreUsage(self.config.store_usage_limit)
        #: the bytes all memory windows hold together (queues and durable subscriptions)
        self.memory = MemoryBudget(self.config.memory_limit)
        self.metrics = BrokerMetrics(self)
        self._writer: StoreWriter | None = None
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._retries: set[asyncio.Task[None]] = set()  # DLQ moves tried again (kept alive)
        self._seq = itertools.count(1)
        self._conn_numbers = itertools.count(1)
        self._first_stored: int | None = None  # the lowest message ID this broker stored
        self._dlq_audit = DeadLetterAudit()
        #: store IDs whose move to the DLQ (or expiry removal) is in flight: how many moves
        self._moving: dict[int, int] = {}
        self._idle_since: dict[str, float] = {}  # destination -> when first seen idle
        #: store IDs removed while an expiry sweep reads the store (None: no sweep reading)
        self._swept: set[int] | None = None
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
        tls: dict[str, Any] = {}
        if self.config.tls is not None:  # uvloop refuses a handshake timeout without TLS
            tls = {"ssl": self.config.tls, "ssl_handshake_timeout": TLS_HANDSHAKE_S}
        self._server = await asyncio.start_server(self._accept, host, port, **tls)
        self.port = self._server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(self.config.expiry_interval, self.sweep_expired))
        ]
        if self.config.destination_gc_after > 0:  # 0 disables it
            sweep = self._every(self.config.destination_gc_after / 2, self.forget_idle)
            self._tasks.append(loop.create_task(sweep))
        if self.config.cleanup_interval > 0:  # 0 disables it
            cleanup = self._every(self.config.cleanup_interval, self._cleanup)
            self._tasks.append(loop.create_task(cleanup))
        if self.config.metrics_port is not None:
            self.metrics.serve(self.config.metrics_host, self.config.metrics_port)
        over = " (TLS)" if tls else ""
        log.info("STOMP broker listening on %s:%d%s", host, self.port, over)

    async def _load(self) -> None:
        store = self.store
        containers = await asyncio.to_thread(store.destinations)
        for c in containers:
            if c.startswith("queue://"):
                depth = await asyncio.to_thread(store.count, c)
                self.queues[c] = Queue(self, c, depth=depth, loaded=depth == 0)
            elif c.startswith("topic://"):
                self.topic(c)
        for sub in await asyncio.to_thread(store.subscriptions):
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
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        for conn in list(self.connections):
            conn.stop_reading()
        gates = [t.gate for t in self.topics.values()] + [q.gate for q in self.queues.values()]
        for gate in gates:
            gate.open()  # producers held back by flow control see they are closing
        self.usage.gate.wake()  # so do those waiting for store space (it stays as full)
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=self.config.stop_timeout)
        for task in list(self._conn_tasks):
            task.cancel()
        if self._writer is not None:
            await self._writer.close()
        self.metrics.close()
        if self._server is not None:
            await self._server.wait_closed()
        log.info("STOMP broker stopped")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limit = self.config.max_connections
        if limit and len(self.connections) >= limit:
            await self._refuse(reader, writer, limit)
            return
        conn = Connection(self, reader, writer, next(self._conn_numbers))
        self.connections.add(conn)
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        try:
            await conn.run()
        except Exception:
            log.exception("connection %s failed", conn.peer)
        finally:
            self.connections.discard(conn)
            self._conn_tasks.discard(task)

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int
    ) -> None:
        """One connection more than ``max_connections``: its CONNECT frame is answered with
        an ERROR frame (a client closed before it sent one may never see it), then closed."""
        self.refused_connections += 1
        message = (
            f"the broker serves at most {limit} connections (max_connections, "
            "MQSTORE_MAX_CONNECTIONS) and all are in use: try again later"
        )
        if self.refused_connections == 1 or self.refused_connections % 1000 == 0:
            peer = writer.get_extra_info("peername")
            count = self.refused_connections
            log.warning(
                "refused a connection from %s: %s (%d refused so far)", peer, message, count
            )
        headers = [("message", message), ("content-type", "text/plain")]
        try:
            async with asyncio.timeout(5):
                await reader.readuntil(b"\0")  # the CONNECT frame (or whatever comes first)
                writer.write(encode_frame("ERROR", headers, message.encode()))
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        await close_after_output(reader, writer)

    async def _every(self, seconds: float, job: Any) -> None:
        """Run ``job`` every ``seconds``. While it keeps failing with the same kind of mqstore
        error (the database away), that is logged once a minute, without a traceback."""
        failing: str | None = None
        last_logged = 0.0
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except MqstoreError as exc:  # a known condition: one line
                now = time.monotonic()
                if type(exc).__name__ != failing or now - last_logged >= 60:
                    log.error("%s failed: %s", job.__name__, exc)
                    failing, last_logged = type(exc).__name__, now
            except Exception:
                log.exception("periodic broker job %s failed", job.__name__)
            else:
                if failing is not None:
                    log.info("%s works again", job.__name__)
                failing = None

    # -- services for destinations and connections ------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def writer_submit(self, op: Op, done: Done | None) -> asyncio.Future[list[int]]:
        """Queue store work; ``done(ids, exc)`` runs on the loop once it is durable (or failed)."""
        assert self._writer is not None, "broker not started"
        op.done = self._noting_removals(op.removes, done) if op.removes else done
        return self._writer.submit(op)

    def _noting_removals(self, removes: list[Removal], done: Done | None) -> Done:
        """``done``, also telling an expiry sweep reading the store what left it meanwhile."""

        def noted(ids: list[int] | None, exc: BaseException | None) -> None:
            if exc is None and self._swept is not None:
                self._swept.update(r.id for r in removes)
            if done is not None:
                done(ids, exc)

        return noted

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

    async def forget_idle(self) -> None:
        """Forget destinations found idle at every sweep for ``destination_gc_after``
        seconds (one-off reply queues would otherwise add memory and metrics for ever)."""
        now = time.monotonic()
        after = self.config.destination_gc_after
        dests: list[Queue | Topic] = [*self.queues.values(), *self.topics.values()]
        for dest in dests:
            name = dest.container
            if not dest.idle():
                self._idle_since.pop(name, None)
            elif now - self._idle_since.setdefault(name, now) >= after:
                table: dict[str, Any] = self.queues if isinstance(dest, Queue) else self.topics
                del table[name]
                del self._idle_since[name]

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

    def dead_letter(
        self, dest: Dispatcher, msgs: list[BrokerMessage], outcome: Outcome
    ) -> asyncio.Future[list[int]]:
        """Atomically consume ``msgs`` from ``dest`` and add copies to the DLQ (persistent only).

        As ActiveMQ's DLQ audit, a copy the DLQ holds, is about to hold or lately held
        (another subscriber of a topic dead-lettered the same message) is not added twice;
        the messages are consumed all the same.
        """
        op, finish = dest.settle_work(msgs, outcome)
        move = _Move(op, finish, asyncio.get_running_loop().create_future(), dest, msgs)
        move.ids = [m.store_id for m in msgs if m.store_id is not None]
        self._hold(move.ids)
        for m in msgs:
            dlq = self.config.dlq_for(m.container)
            if (m.persistent or self.config.dlq_non_persistent) and m.container != dlq:
                self._add_copy(move, dead_letter(m, dlq))
        if move.copies:
            log.info("%d message(s) of %s moved to the DLQ (%s)", len(move.copies), dest.container,
                     outcome.value)  # fmt: skip
        self._submit_move(move, retry=True)
        return move.result

    def _add_copy(self, move: _Move, copy: BrokerMessage) -> None:
        """Add ``copy`` to ``move`` unless a copy of it is on its way to the DLQ already."""
        row = copy.new_message()
        key = (row.container, row.msgid_prod, row.msgid_seq)
        if not self._dlq_audit.claim(key):
            log.info("not adding duplicate %s to %s", copy.ow.jms_message_id, copy.container)
            return
        move.keys.append(key)
        move.copies.append(copy)

    def _submit_move(self, move: _Move, *, retry: bool) -> None:
        op = move.op
        op.adds = [c.new_message() for c in move.copies]

        def done(ids: list[int] | None, exc: BaseException | None) -> None:
            if retry and move.copies and isinstance(exc, DuplicateMessageError):
                task = asyncio.get_running_loop().create_task(self._move_without_stored(move))
                self._retries.add(task)
                task.add_done_callback(self._retries.discard)
                return
            self._dlq_audit.settle(move.keys, added=exc is None and ids is not None)
            self._release(move.ids)
            if exc is not None or ids is None:
                log.error("moving messages to the DLQ failed: %s", exc)
                move.dest.unsettled(move.msgs)
                _fail(move.result, exc or StoreError("the store returned no IDs"))
                return
            for copy, ident in zip(move.copies, ids, strict=True):
                self.stored(copy, ident)
                self.usage.add(copy.size)
                self.route(copy)
            move.finish()
            if not move.result.done():
                move.result.set_result(ids)

        self.writer_submit(op, done)

    async def _move_without_stored(self, move: _Move) -> None:
        """The DLQ refused a copy as a duplicate (one stored before, e.g. before a restart):
        move again without the copies it holds, so the messages are still consumed."""
        try:
            stored = await asyncio.to_thread(self._stored_copies, move.copies)
        except Exception as exc:
            self._dlq_audit.settle(move.keys, added=False)
            self._release(move.ids)
            log.error("moving messages to the DLQ failed: %s", exc)
            move.dest.unsettled(move.msgs)
            _fail(move.result, exc)
            return
        for copy in stored:
            log.info("not adding duplicate %s to %s", copy.ow.jms_message_id, copy.container)
        move.copies = [c for c in move.copies if c not in stored]
        move.op = Op(removes=move.op.removes, acks=move.op.acks)
        self._submit_move(move, retry=False)

    def _hold(self, ids: list[int]) -> None:
        """Mark store IDs as being moved (an expiry sweep leaves them alone)."""
        for i in ids:
            self._moving[i] = self._moving.get(i, 0) + 1

    def _release(self, ids: list[int]) -> None:
        for i in ids:
            left = self._moving.pop(i, 1) - 1
            if left > 0:
                self._moving[i] = left

    def _stored_copies(self, copies: list[BrokerMessage]) -> list[BrokerMessage]:
        """Worker thread: the copies whose JMS message id their DLQ holds already."""
        found = []
        for copy in copies:
            row = copy.new_message()
            if self.store.find(row.msgid_prod, row.msgid_seq, row.container) is not None:
                found.append(copy)
        return found

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

    # -- maintenance ----------------------------------------------------------------------------
    async def sweep_expired(self) -> None:
        """Dead-letter expired messages in memory and in the store (persistent ones)."""
        now = int(time.time() * 1000)
        for q in list(self.queues.values()):
            expired = q.expired_pending(now)
            if expired:
                self.dead_letter(q, expired, Outcome.EXPIRED)
        self._swept = set()
        try:
            rows = await asyncio.to_thread(
                self.store.expire, now, self.config.expiry_batch, remove=False
            )
            swept = self._swept
        finally:
            self._swept = None
        removals: list[Removal] = []
        for row in rows:
            if row.id in self._moving or row.id in swept:
                continue  # its move is in flight, or it left while the store was read
            if row.container.startswith("queue://"):
                q = self.queue(row.container)
                if row.id in q.tracked:
                    for msg in q.drop_pending({row.id}):
                        self.dead_letter(q, [msg], Outcome.EXPIRED)
                    continue
                gone = self.read_row(row, 0, f"expiry of {row.container}")
                if gone is None:  # nothing to dead-letter: it stays
                    continue
                q.tracked.add(row.id)
                self.dead_letter(q, [gone], Outcome.EXPIRED)
            else:
                removals.append(Removal(row.container, row.id, Outcome.EXPIRED))
        if removals:
            self._remove_expired(removals)

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

    def _remove_expired(self, removals: list[Removal]) -> None:
        """Remove expired durable topic messages (tracked so the next sweep skips them)."""
        ids = [r.id for r in removals]
        self._hold(ids)

        def done(_ids: list[int] | None, exc: BaseException | None) -> None:
            self._release(ids)
            if exc is not None:
                log.error("removing expired topic messages failed: %s", exc)
                return
            for container in {r.container for r in removals}:
                if (topic := self.topics.get(container)) is not None:
                    topic.expired({r.id for r in removals if r.container == container})

        self.writer_submit(Op(removes=removals), done)

    async def _cleanup(self) -> None:
        await asyncio.to_thread(self.store.cleanup)

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


@dataclass(eq=False)
class _Move:
    """One move of messages to the DLQ: the settle work and the copies it adds."""

    op: Op
    finish: Callable[[], None]
    result: asyncio.Future[list[int]]
    dest: Dispatcher  # where the messages are consumed from
    msgs: list[BrokerMessage]  # the messages it consumes
    copies: list[BrokerMessage] = field(default_factory=list)
    keys: list[tuple[str, str, int]] = field(default_factory=list)  # audit entries it holds
    ids: list[int] = field(default_factory=list)  # store IDs of the messages it consumes


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


def _fail(fut: asyncio.Future[list[int]], exc: BaseException) -> None:
    """Fail ``fut`` (marked retrieved: callers may not wait for it)."""
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()
