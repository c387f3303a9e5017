"""What the STOMP command handlers share: the connection state they act on, the wait for
pipelined sends, the transaction a frame names, and the errors they raise."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from mqstore.broker.frames import Frame, FrameParser
from mqstore.broker.subscriptions import Consumer, Delivery
from mqstore.broker.transactions import Transaction
from mqstore.errors import (
    CommitOutcomeUnknownError,
    DatabaseUnavailableError,
    JournalUnavailableError,
    LockError,
)
from mqstore.openwire import ProducerId

if TYPE_CHECKING:
    from mqstore.broker.server import Broker

log = logging.getLogger(__name__)


def protocol_error(message: str) -> Exception:
    """A client error: the connection answers it with an ERROR frame, then closes."""
    from mqstore.broker.protocol import ProtocolError

    return ProtocolError(message)


class HandlerState:
    """Frame handling's view of a connection; the state lives in the connection."""

    broker: Broker
    version: str
    connected: bool
    closing: bool
    #: The store refused one of its frames for trouble of its own (its database or journal
    #: away, the lock lost): what it held comes back uncounted as a redelivery.
    store_refused: bool
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
    def error(
        self,
        message: str,
        frame: Frame | None = None,
        detail: str = "",
        level: int = logging.INFO,
        receipt: str | None = None,
    ) -> None: ...

    def refusal(self, exc: BaseException) -> str:
        """What an ERROR says about ``exc`` (:func:`for_client`); a refusal for the store's
        own trouble marks the connection :attr:`store_refused`."""
        if isinstance(exc, STORE_TROUBLE):
            self.store_refused = True
        return for_client(exc)

    def gone(self) -> bool:
        raise NotImplementedError  # provided by Connection

    async def settle_sends(self) -> None:
        """Wait until every pipelined persistent SEND of this connection is stored."""
        while self.unsettled:
            self._settled.clear()
            await self._settled.wait()

    def _tx(self, tx_id: str) -> Transaction:
        """The open transaction ``tx_id`` of this connection (SEND, ACK, NACK, COMMIT, ABORT)."""
        tx = self.txs.get(tx_id)
        if tx is None:
            raise protocol_error(f"transaction {tx_id!r} was not begun on this connection")
        return tx


#: Refusals for the store's own trouble, not the client's: the messages a connection closed
#: by one held come back marked redelivered but count no redelivery (else an outage would
#: send healthy messages to the DLQ).
STORE_TROUBLE = (DatabaseUnavailableError, LockError, JournalUnavailableError)


def for_client(exc: BaseException) -> str:
    """What an ERROR frame says about ``exc``: the store's own trouble (its database away,
    the master lock lost, its journal) in words for a client, with no server names (those
    are logged)."""
    if isinstance(exc, CommitOutcomeUnknownError):
        log.warning("store unavailable: %s", exc)
        return (
            "the broker's store is unavailable: it lost its database while committing this "
            "frame, which may or may not have been done; try again later, checking first where "
            "doing it twice would matter"
        )
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
