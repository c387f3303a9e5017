"""STOMP command handlers (mixed into :class:`~mqstore.broker.protocol.Connection`)."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import TYPE_CHECKING

from mqstore.broker.durable import selector_way_out
from mqstore.broker.flow import Limited, waited
from mqstore.broker.frames import Frame, FrameParser, encode_frame
from mqstore.broker.messages import (
    BrokerMessage,
    container_of,
    destination_options,
    from_send,
    stomp_name,
)
from mqstore.broker.subscriptions import ACK_MODES, MESSAGE_OVERHEAD, Consumer, Delivery
from mqstore.broker.transactions import Transaction
from mqstore.broker.writer import Op
from mqstore.errors import DatabaseUnavailableError, JournalUnavailableError, LockError
from mqstore.openwire import ProducerId
from mqstore.store.model import Outcome, SubscriptionKey

if TYPE_CHECKING:
    from mqstore.broker.server import Broker, Destination

log = logging.getLogger(__name__)

#: Seconds between two looks, while a producer is held back, at whether its peer went away.
PEER_POLL_S = 1.0

#: What a refused SEND's ERROR says became of its message.
NOT_TAKEN = "the message was not taken; send it again later"


def _error(message: str) -> Exception:
    from mqstore.broker.protocol import ProtocolError

    return ProtocolError(message)


class Handlers:
    """Frame handling; the state lives in the connection."""

    broker: Broker
    version: str
    connected: bool
    closing: bool
    client_id: str | None
    login: str | None
    consumers: dict[str, Consumer]
    tokens: dict[str, Delivery]
    txs: dict[str, Transaction]
    settling: set[asyncio.Future[list[int]]]  # ACK/NACK store work sent without a receipt
    producer: ProducerId
    sequence: int
    unsettled: int
    unsettled_bytes: int
    _settled: asyncio.Event
    send_interval: float
    recv_interval: float
    peer: str
    parser: FrameParser

    def send_frame(self, data: bytes) -> None: ...  # provided by Connection
    def receipt(self, frame: Frame) -> None: ...
    def wake_writer(self) -> None: ...
    def error(self, message: str, frame: Frame | None = None, detail: str = "") -> None: ...

    def gone(self) -> bool:
        raise NotImplementedError  # provided by Connection

    async def handle(self, frame: Frame) -> None:
        """Act on one inbound frame."""
        cmd = frame.command
        if not self.connected:
            if cmd not in ("CONNECT", "STOMP"):
                raise _error(f"expected a CONNECT frame, got {cmd}")
            await self.on_connect(frame)
            return
        if cmd in ("CONNECT", "STOMP"):
            raise _error("already connected: a second CONNECT is not allowed")
        if not (cmd == "SEND" and frame.get("transaction") is None):
            await self.settle_sends()
        handler = getattr(self, "on_" + cmd.lower())
        await handler(frame)

    async def settle_sends(self) -> None:
        """Wait until every pipelined persistent SEND of this connection is stored."""
        while self.unsettled:
            self._settled.clear()
            await self._settled.wait()

    # -- CONNECT ----------------------------------------------------------------------------
    async def on_connect(self, frame: Frame) -> None:
        cfg = self.broker.config
        accepted = frame.get("accept-version")
        if accepted is None:
            version = "1.0"
        else:
            offered = {v.strip() for v in accepted.split(",")}
            common = [v for v in ("1.2", "1.1", "1.0") if v in offered]
            if not common:
                raise _error(f"no supported protocol version in {accepted!r}; use 1.0, 1.1, 1.2")
            version = common[0]
        self.version = version
        self.parser.version = version
        login = frame.get("login")
        self.login = login
        if cfg.users is not None and not _authentic(cfg.users, login, frame.get("passcode")):
            log.warning("authentication failed for login %r from %s", login, self.peer)
            raise _error("authentication failed: invalid login or passcode")
        client_id = frame.get("client-id")
        if client_id:
            if not self.broker.claim_client_id(client_id, self):
                raise _error(f"client-id {client_id!r} is already connected; use another one")
            self.client_id = client_id
        headers = [("version", version), ("server", "mqstore/0.1"), ("session", self.producer_text)]
        request = frame.get("request-id") or frame.get("receipt")
        if request is not None:  # as ActiveMQ: a client may wait for this id on CONNECTED
            headers += [("response-id", request), ("receipt-id", request)]
        if version != "1.0":
            cx, cy = _heartbeat(frame.get("heart-beat") or "0,0")
            sx, sy = cfg.heartbeat_ms
            self.send_interval = max(sx, cy) / 1000 if sx and cy else 0.0
            self.recv_interval = max(cx, sy) / 1000 if cx and sy else 0.0
            headers.append(("heart-beat", f"{sx},{sy}"))
        self.connected = True
        log.info("STOMP %s connection from %s (login %s)", version, self.peer, login or "-")
        self.send_frame(encode_frame("CONNECTED", headers, b"", version))
        self.wake_writer()  # heart-beats start now

    @property
    def producer_text(self) -> str:
        return str(self.producer.connection_id)

    # -- SEND -------------------------------------------------------------------------------
    async def on_send(self, frame: Frame) -> None:
        dest = frame.get("destination")
        if not dest:
            raise _error("SEND needs a destination header")
        container = container_of(dest)
        self.sequence += 1
        msg = from_send(frame, container, self.producer, self.sequence)
        tx_id = frame.get("transaction")
        if tx_id is not None:
            tx = self._tx(tx_id)
            held = sum(t.size for t in self.txs.values())
            limit = self.broker.config.max_transaction_bytes
            if limit and held >= limit:
                raise _error(
                    f"the open transactions of this connection hold {held} bytes of "
                    f"uncommitted messages (max_transaction_bytes {limit}): commit in "
                    "smaller transactions; they are rolled back"
                )
            tx.sends.append(msg)
            tx.size += msg.size + MESSAGE_OVERHEAD
            self.receipt(frame)
            return
        broker = self.broker
        cfg = broker.config
        full = self.limit_of(msg)
        if (
            full is not None
            and full.gate.closed  # the per-SEND cost: the rest only when held back
            and not await self.pass_limit(full, cfg.memory_block_timeout, f"SEND to {container}")
        ):
            return  # the connection went away meanwhile: the message was not taken
        if not (msg.persistent and broker.must_store(container)):
            await self.settle_sends()
            broker.route(msg)
            self.receipt(frame)
            return
        usage = broker.usage
        if usage.gate.closed and not await self.pass_limit(
            usage, cfg.producer_block_timeout, f"SEND to {container}"
        ):
            return
        if (
            self.unsettled >= cfg.max_pipelined_sends
            or self.unsettled_bytes >= cfg.max_pending_bytes
        ):
            await self.settle_sends()
        broker.usage.add(msg.size)
        self.unsettled += 1
        self.unsettled_bytes += msg.size

        def done(ids: list[int] | None, exc: BaseException | None) -> None:
            self.unsettled -= 1
            self.unsettled_bytes -= msg.size
            if not self.unsettled:
                self._settled.set()
            if exc is not None or not ids:
                broker.usage.release(msg.size)
                why = for_client(exc) if exc is not None else "the store returned no ID"
                self.error(f"the message could not be stored: {why}", frame)
                return
            broker.stored(msg, ids[0])
            broker.route(msg)
            self.receipt(frame)

        broker.writer_submit(Op(adds=[msg.new_message()]), done)

    def limit_of(self, msg: BrokerMessage) -> Limited | None:
        """Where a producer of ``msg`` waits while its destination holds too much: the
        topic, or the queue for a non-persistent message (a persistent one waits for the
        store usage instead)."""
        container = msg.container
        if container.startswith("topic://"):
            return self.broker.topics.get(container)
        if msg.persistent:
            return None
        return self.broker.queues.get(container)

    async def pass_limit(
        self,
        limited: Limited,
        timeout: float | None,
        what: str,
        outcome: str = NOT_TAKEN,
        count: int = 1,
        deadline: float | None = None,
    ) -> bool:
        """Producer flow control: wait while ``limited`` is full (the frame is not acted on,
        no more frames are read: TCP pushes back), at most ``timeout`` seconds (None: as long
        as it takes; 0: not at all), or until ``deadline`` (event loop time) when the frame
        already waited at another limit. True once there is room. False if the connection
        closed or its peer went away meanwhile: then the frame is not taken, and gets no
        receipt. Still full after ``timeout``: the frame (``what``, holding ``count``
        messages) is refused with an ERROR saying ``outcome``, after the frames before it
        are settled."""
        gate = limited.gate
        wait = timeout
        if deadline is not None and timeout:
            wait = max(deadline - asyncio.get_running_loop().time(), 0.0)
        if wait != 0 and await gate.wait(self.gone, PEER_POLL_S, wait):
            return not self.gone()
        await self.settle_sends()  # the receipts of the frames before it come first
        if self.gone():
            return False
        gate.refused += count
        raise _error(f"{what} refused {waited(timeout)} ({outcome}): {limited.refusal()}")

    # -- SUBSCRIBE / UNSUBSCRIBE -------------------------------------------------------------
    async def on_subscribe(self, frame: Frame) -> None:
        cfg = self.broker.config
        dest = frame.get("destination")
        if not dest:
            raise _error("SUBSCRIBE needs a destination header")
        container = container_of(dest)
        sub_id = frame.get("id") or (dest if self.version == "1.0" else None)
        if sub_id is None:
            raise _error("SUBSCRIBE needs an id header")
        if sub_id in self.consumers:
            raise _error(f"subscription id {sub_id!r} is already in use on this connection")
        ack = frame.get("ack", "auto")
        if ack not in ACK_MODES:
            raise _error(f"unknown ack mode {ack!r}; use auto, client or client-individual")
        name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        is_topic = container.startswith("topic://")
        if frame.get("selector"):
            raise _error(_no_selectors(stomp_name(container), name if is_topic else None))
        if name and not is_topic:
            raise _error(
                f"cannot durably subscribe to a queue ({dest}): a durable subscription "
                "(activemq.subscriptionName) is for a /topic/; leave the header out to "
                "consume the queue"
            )
        durable = bool(name)
        if durable and not self.client_id:
            raise _error("a durable subscription needs a client-id header on CONNECT")
        browser = frame.get("browser") == "true"
        if browser and is_topic:
            raise _error("browsing is only possible on queues")
        default = (
            cfg.queue_prefetch if not is_topic
            else cfg.durable_topic_prefetch if durable else cfg.topic_prefetch
        )  # fmt: skip
        # Consumer settings: a header, else the destination's option (``?consumer.x=...``).
        options = destination_options(dest)
        prefetch_size = frame.get("activemq.prefetchSize") or options.get("consumer.prefetchSize")
        try:
            prefetch = int(prefetch_size or default)
        except ValueError:
            raise _error("activemq.prefetchSize must be an integer") from None
        exclusive = frame.get("activemq.exclusive") or options.get("consumer.exclusive")
        consumer = Consumer(
            self,  # type: ignore[arg-type]
            sub_id, container, "auto" if browser else ack, max(prefetch, 1),
            exclusive=exclusive == "true", browser=browser,
        )  # fmt: skip
        self.consumers[sub_id] = consumer
        try:
            await self.broker.subscribe(consumer, name if durable else None, self.client_id)
        except Exception:
            del self.consumers[sub_id]
            raise
        self.receipt(frame)

    async def on_unsubscribe(self, frame: Frame) -> None:
        sub_id = frame.get("id") or frame.get("destination")
        if not sub_id:
            raise _error(
                "UNSUBSCRIBE needs an id header (the id its SUBSCRIBE gave) or a destination "
                "header (with activemq.subscriptionName: the topic of the durable subscription "
                "to delete)"
            )
        found = self._subscription_named(frame, sub_id)
        consumer = self.consumers.get(found) if found is not None else None
        name = frame.get("activemq.subscriptionName") or frame.get("durable-subscription-name")
        if consumer is None and not name:
            named = f"id {sub_id!r}" if frame.get("id") else f"destination {sub_id!r}"
            raise _error(f"no subscription with {named} on this connection")
        container = ""
        if name:
            dest = frame.get("destination")
            container = container_of(dest) if dest else consumer.container if consumer else ""
            if not self.client_id or not container.startswith("topic://"):
                raise _error("removing a durable subscription needs client-id and a topic")
            await self._refuse_durable_in_use(container, name, consumer)
        if found is not None and consumer is not None:
            del self.consumers[found]
            held = list(consumer.in_flight.values())
            self.broker.unsubscribe(consumer)
            # A queue keeps the deliveries settled in a transaction for its COMMIT or ABORT;
            # the others left with the consumer (a durable subscriber reads them again).
            kept = {id(d) for d in consumer.in_flight.values()}
            for tx in self.txs.values():
                tx.forget([d for d in held if id(d) not in kept])
        if name and self.client_id:
            await self.broker.delete_durable(container, self.client_id, name)
        self.receipt(frame)

    def _subscription_named(self, frame: Frame, sub_id: str | None) -> str | None:
        """The id of the subscription an UNSUBSCRIBE names. STOMP 1.0 may name the
        destination of a subscription made with an id (the first such one, as in ActiveMQ)."""
        if sub_id in self.consumers:
            return sub_id
        if self.version == "1.0" and not frame.get("id") and sub_id:
            container = container_of(sub_id)
            return next((k for k, c in self.consumers.items() if c.container == container), None)
        return None

    async def _refuse_durable_in_use(
        self, container: str, name: str, leaving: Consumer | None
    ) -> None:
        """A durable subscription is deleted only once its subscriber is gone (as ActiveMQ:
        "durable consumer is in use"), or goes in the same UNSUBSCRIBE; a subscriber of the
        client's previous connection, still closing, is waited for (as a SUBSCRIBE does)."""
        topic = self.broker.topics.get(container)
        key = SubscriptionKey(container, self.client_id or "", name)
        sub = topic.durables.get(key) if topic is not None else None
        if sub is None or sub.consumer is None or sub.consumer is leaving:
            return
        if not await self.broker.wait_detached(sub):
            user = sub.consumer.sub_id if sub.consumer is not None else None
            raise _error(
                f"durable subscription {name!r} is in use by subscription id {user!r}: "
                "UNSUBSCRIBE that id first (or name it in the same frame), then delete the "
                "durable subscription"
            )

    # -- ACK / NACK ---------------------------------------------------------------------------
    def _find(self, frame: Frame) -> Delivery:
        if self.version == "1.2":
            token = frame.get("id")
            if not token:
                raise _error(
                    f"{frame.command} needs an id header (STOMP 1.2): the value of the ack "
                    "header of the MESSAGE it settles"
                )
            delivery = self.tokens.get(token)
            if delivery is None:
                raise _error(f"{frame.command} for unknown or already settled ack id {token!r}")
            return delivery
        mid = frame.get("message-id")
        if not mid:
            raise _error(f"{frame.command} needs a message-id header")
        sub = frame.get("subscription")
        consumers = [self.consumers[sub]] if sub in self.consumers else self.consumers.values()
        for c in consumers:
            found = c.in_flight.get(mid)
            if found is not None:
                return found
        raise _error(f"{frame.command} for unknown or already settled message {mid!r}")

    def _targets(self, delivery: Delivery) -> list[Delivery]:
        if delivery.consumer.ack_mode == "client":
            return delivery.consumer.up_to(delivery)
        return [delivery]

    async def on_ack(self, frame: Frame) -> None:
        await self._settle(frame, nack=False)

    async def on_nack(self, frame: Frame) -> None:
        if self.version == "1.0":
            raise _error("NACK is not part of STOMP 1.0")
        await self._settle(frame, nack=True)

    async def _settle(self, frame: Frame, *, nack: bool) -> None:
        delivery = self._find(frame)
        if delivery.tx is not None and delivery.tx == frame.get("transaction"):
            self.receipt(frame)  # a repeated ACK in the same transaction changes nothing
            return
        if delivery.tx is not None:
            raise _error(
                f"{frame.command} for a message already settled in transaction "
                f"{delivery.tx!r} (commit or abort it first)"
            )
        # A NACK poisons only the message it names, in every ack mode (ActiveMQ's
        # StompSubscription.onStompMessageNack); only an ACK is cumulative in client mode.
        targets = [delivery] if nack else self._targets(delivery)
        tx_id = frame.get("transaction")
        if tx_id is not None:
            tx = self._tx(tx_id)
            for d in targets:
                d.consumer.mark_tx(d, tx_id)
            (tx.nacks if nack else tx.acks).extend(targets)
            if delivery.consumer.dest is not None:
                delivery.consumer.dest.kick()  # the freed prefetch credit takes a message
            self.receipt(frame)
            return
        for d in targets:
            d.consumer.settle(d)
        dest = delivery.consumer.dest
        assert dest is not None
        msgs = [d.msg for d in targets]
        if nack:
            fut = self.broker.dead_letter(dest, msgs, Outcome.DEAD_LETTERED)
        else:
            op, finish = dest.settle_work(msgs)
            op.lazy = frame.get("receipt") is None
            fut = self.broker.submit(op, finish, failed=lambda: dest.unsettled(msgs))
        if frame.get("receipt") is not None:
            await asyncio.shield(fut)
        else:
            self.settling.add(fut)
            fut.add_done_callback(self.settling.discard)
        self.receipt(frame)

    # -- transactions ---------------------------------------------------------------------------
    def _tx(self, tx_id: str) -> Transaction:
        tx = self.txs.get(tx_id)
        if tx is None:
            raise _error(f"transaction {tx_id!r} was not begun on this connection")
        return tx

    def _tx_header(self, frame: Frame) -> str:
        tx_id = frame.get("transaction")
        if not tx_id:
            raise _error(f"{frame.command} needs a transaction header")
        return tx_id

    async def on_begin(self, frame: Frame) -> None:
        tx_id = self._tx_header(frame)
        if tx_id in self.txs:
            raise _error(f"transaction {tx_id!r} is already in progress")
        limit = self.broker.config.max_transactions
        if limit and len(self.txs) >= limit:
            raise _error(
                f"BEGIN of transaction {tx_id!r} refused: this connection has {len(self.txs)} "
                f"open transactions (max_transactions {limit}, MQSTORE_MAX_TRANSACTIONS): "
                "commit or abort one before beginning another; they are rolled back"
            )
        self.txs[tx_id] = Transaction(tx_id)
        self.receipt(frame)

    async def on_commit(self, frame: Frame) -> None:
        tx = self._tx(self._tx_header(frame))
        broker = self.broker
        cfg = broker.config
        what = f"COMMIT of transaction {tx.tx_id!r}"
        rolled_back = "it is rolled back: none of its messages was taken; send them again later"
        limits: dict[int, tuple[Limited, int]] = {}
        for m in tx.sends:
            if (limited := self.limit_of(m)) is not None:
                count = limits.get(id(limited), (limited, 0))[1]
                limits[id(limited)] = (limited, count + 1)
        # One wait for all of them: at most memory_block_timeout in all, until every one
        # has room at once (a limit passed earlier may have filled up meanwhile).
        timeout = cfg.memory_block_timeout
        deadline = None if not timeout else asyncio.get_running_loop().time() + timeout
        while full := [(lim, n) for lim, n in limits.values() if lim.gate.closed]:
            limited, count = full[0]
            if not await self.pass_limit(limited, timeout, what, rolled_back, count, deadline):
                return  # the connection went away meanwhile: it aborts the transaction
        stored = [m for m in tx.sends if m.persistent and broker.must_store(m.container)]
        if stored and broker.usage.gate.closed:
            wait = cfg.producer_block_timeout
            if not await self.pass_limit(broker.usage, wait, what, rolled_back, len(stored)):
                return
        del self.txs[tx.tx_id]  # refused above, the closing connection aborts it
        op = Op(adds=[m.new_message() for m in stored])
        finishes = []
        by_dest: dict[int, tuple[Destination, list[BrokerMessage]]] = {}
        for d in tx.acks:
            d.consumer.settle(d)
            if d.consumer.dest is not None:
                by_dest.setdefault(id(d.consumer.dest), (d.consumer.dest, []))[1].append(d.msg)
        for dest, msgs in by_dest.values():
            part, finish = dest.settle_work(msgs)
            op.removes += part.removes
            op.acks += part.acks
            finishes.append(finish)
        for m in stored:
            broker.usage.add(m.size)
        try:
            ids = await broker.writer_submit(op, None)
        except BaseException:
            for m in stored:  # nothing was stored
                broker.usage.release(m.size)
            for dest, msgs in by_dest.values():  # nor consumed
                dest.unsettled(msgs)
            # Its NACKs were not acted on: the messages come back, as after an ABORT.
            self.abort(Transaction(tx.tx_id, nacks=tx.nacks))
            raise
        for m, ident in zip(stored, ids, strict=True):
            broker.stored(m, ident)
        for m in tx.sends:
            broker.route(m)
        for finish in finishes:
            finish()
        nacked: dict[int, tuple[Destination, list[BrokerMessage]]] = {}
        for d in tx.nacks:
            d.consumer.settle(d)
            if d.consumer.dest is not None:
                nacked.setdefault(id(d.consumer.dest), (d.consumer.dest, []))[1].append(d.msg)
        for dest, msgs in nacked.values():
            broker.dead_letter(dest, msgs, Outcome.DEAD_LETTERED)
        self.receipt(frame)

    async def on_abort(self, frame: Frame) -> None:
        tx = self._tx(self._tx_header(frame))
        del self.txs[tx.tx_id]
        self.abort(tx)
        self.receipt(frame)

    def abort(self, tx: Transaction) -> None:
        """Drop the sends; acked deliveries go back for redelivery."""
        groups: dict[int, tuple[Destination, list[Delivery]]] = {}
        for d in tx.acks + tx.nacks:
            d.consumer.unmark_tx(d)
            if d.consumer.dest is not None:
                groups.setdefault(id(d.consumer.dest), (d.consumer.dest, []))[1].append(d)
        for dest, deliveries in groups.values():
            dest.give_back(deliveries)

    async def on_disconnect(self, frame: Frame) -> None:
        if self.settling and frame.get("receipt") is not None:
            # Its receipt says every frame before it is done: the acks sent without one too.
            await asyncio.wait(list(self.settling))
        self.receipt(frame)
        self.closing = True


def for_client(exc: BaseException) -> str:
    """What an ERROR frame says about ``exc``: the store's own trouble (its database away,
    the master lock lost, its journal) in words for a client, with no server names (those
    are logged)."""
    if isinstance(exc, DatabaseUnavailableError):
        log.warning("store unavailable: %s", exc)
        return "the broker's store is unavailable; nothing of this frame was done, try again later"
    if isinstance(exc, LockError):
        log.warning("not master: %s", exc)
        return "this broker is not the master any more; reconnect to the master"
    if isinstance(exc, JournalUnavailableError):
        log.warning("journal: %s", exc)
        return "the broker's journal took no write (its disk full, or failed); try again later"
    return str(exc)


def _no_selectors(destination: str, durable: str | None) -> str:
    """The refusal of a SUBSCRIBE with a selector to ``destination`` (its STOMP name), of
    durable subscription ``durable`` of that topic."""
    if not durable:
        return "message selectors are not supported by this broker"
    return (
        "message selectors are not supported by this broker, so durable subscription "
        f"{durable!r} cannot be resumed with one: if ActiveMQ stored it with this selector, "
        + selector_way_out(destination, durable)
    )


def _authentic(users: dict[str, str], login: str | None, passcode: str | None) -> bool:
    """Whether ``login`` is a known user and ``passcode`` its passcode (constant time)."""
    expected = users.get(login) if login else None
    if expected is None or passcode is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), passcode.encode("utf-8"))


def _heartbeat(text: str) -> tuple[int, int]:
    try:
        cx, cy = (int(part) for part in text.split(","))
    except ValueError:
        raise _error(f"malformed heart-beat header {text!r}; expected two integers") from None
    if cx < 0 or cy < 0:
        raise _error("heart-beat values must not be negative")
    return cx, cy
