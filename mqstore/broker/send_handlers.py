"""STOMP SEND and transactions (BEGIN, COMMIT, ABORT), with producer flow control: the
command handlers mixed into :class:`~mqstore.broker.protocol.Connection` for producers."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from mqstore.broker.flow import Limited, waited
from mqstore.broker.frames import Frame
from mqstore.broker.handler_state import HandlerState, protocol_error
from mqstore.broker.messages import BrokerMessage, container_of, from_send
from mqstore.broker.subscriptions import MESSAGE_OVERHEAD, Delivery
from mqstore.broker.transactions import Transaction
from mqstore.broker.writer import Op
from mqstore.store.model import Outcome

if TYPE_CHECKING:
    from mqstore.broker.server import Destination

#: Seconds between two looks, while a producer is held back, at whether its peer went away.
PEER_POLL_S = 1.0

#: What a refused SEND's ERROR says became of its message.
NOT_TAKEN = "the message was not taken; send it again later"


class SendHandlers(HandlerState):
    """SEND, BEGIN, COMMIT and ABORT."""

    # -- SEND -------------------------------------------------------------------------------
    async def on_send(self, frame: Frame) -> None:
        dest = frame.get("destination")
        if not dest:
            raise protocol_error("SEND needs a destination header")
        container = container_of(dest)
        self.sequence += 1
        msg = from_send(frame, container, self.producer, self.sequence)
        if msg.persistent:  # what the store keeps: a non-persistent one is never stored
            self.broker.config.limits.check_message(msg.size, len(frame.body))
        tx_id = frame.get("transaction")
        if tx_id is not None:
            tx = self._tx(tx_id)
            held = sum(t.size for t in self.txs.values())
            limit = self.broker.config.max_transaction_bytes
            if limit and held >= limit:
                raise protocol_error(
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
                why = self.refusal(exc) if exc is not None else "the store returned no ID"
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
        raise protocol_error(f"{what} refused {waited(timeout)} ({outcome}): {limited.refusal()}")

    # -- transactions ---------------------------------------------------------------------------
    def _tx_header(self, frame: Frame) -> str:
        """The transaction id a BEGIN, COMMIT or ABORT names."""
        tx_id = frame.get("transaction")
        if not tx_id:
            raise protocol_error(f"{frame.command} needs a transaction header")
        return tx_id

    async def on_begin(self, frame: Frame) -> None:
        tx_id = self._tx_header(frame)
        if tx_id in self.txs:
            raise protocol_error(f"transaction {tx_id!r} is already in progress")
        limit = self.broker.config.max_transactions
        if limit and len(self.txs) >= limit:
            raise protocol_error(
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
                dest.unsettled(msgs, delivered=True)
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
            broker.dead_letter(dest, msgs, Outcome.DEAD_LETTERED, delivered=True)
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
