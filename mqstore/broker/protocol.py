"""One STOMP connection: CONNECT negotiation, heart-beats, frame handling, outbound queue.

Persistent SENDs are pipelined: each goes to the store writer and its receipt follows once
the store call returned; any other frame waits until those sends are settled, so a
connection's frames take effect in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import TYPE_CHECKING, cast

from mqstore.broker.closing import close_after_output
from mqstore.broker.frames import Frame, FrameError, FrameParser, TooLargeError, encode_frame
from mqstore.broker.handlers import Handlers
from mqstore.broker.subscriptions import Consumer, Delivery
from mqstore.broker.transactions import Transaction
from mqstore.errors import MqstoreError
from mqstore.openwire import ProducerId

if TYPE_CHECKING:
    from mqstore.broker.server import Broker

log = logging.getLogger(__name__)

VERSIONS = ("1.0", "1.1", "1.2")

#: Largest frame written straight to the socket; bigger ones go through the write loop,
#: which waits for the socket to drain and then lets dispatch (and held-back producers) on.
DIRECT_WRITE_MAX = 64 * 1024


class ProtocolError(Exception):
    """A client error: an ERROR frame with this message is sent and the connection closed."""


class Connection(Handlers):
    """Per-connection state machine."""

    def __init__(
        self,
        broker: Broker,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        number: int,
    ) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.number = number
        self.version = "1.0"
        # max_connect_frame_size until CONNECTED: unauthenticated, it may not make us hold more
        self.parser = FrameParser(broker.config.limits, accepted=False)
        self.connected = False
        self.closing = False  # no more frames are read
        self.store_refused = False
        self._errored = False  # an ERROR frame was sent: nothing else is
        self._finished = False  # cleanup done: the write loop ends once it has written all
        #: Set once cleanup detached the consumers (a reconnect of the client waits for it).
        self.detached = asyncio.Event()
        self.client_id: str | None = None
        self.login: str | None = None
        self.consumers: dict[str, Consumer] = {}
        self.tokens: dict[str, Delivery] = {}
        self.txs: dict[str, Transaction] = {}
        self.settling: set[asyncio.Future[list[int]]] = set()
        self.producer = ProducerId(f"ID:{broker.node}-{number}", 1, 1)
        self.sequence = 0
        self.unsettled = 0
        self.unsettled_bytes = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._out: deque[tuple[bytes, bool]] = deque()
        self._out_bytes = 0
        self._out_event = asyncio.Event()
        self._room_event = asyncio.Event()
        self.queued_messages = 0
        self.send_interval = 0.0
        self.recv_interval = 0.0
        self._token = 0
        self._loop = asyncio.get_running_loop()
        self._last_write = self._loop.time()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)

    # -- outbound ---------------------------------------------------------------------------
    def room(self) -> int:
        if self.closing:
            return 0  # a closing connection takes no new deliveries
        cfg = self.broker.config
        if self.unwritten() >= cfg.max_pending_bytes:
            return 0
        return cfg.max_pending_frames - self.queued_messages

    def unwritten(self) -> int:
        """Bytes of frames queued here or in the socket's write buffer, not yet sent."""
        return self._out_bytes + self.writer.transport.get_write_buffer_size()

    def _write_through(self, data: bytes) -> bool:
        """Write ``data`` at once when nothing is queued and the socket takes it unbuffered.

        Saves a wake-up of the write loop per frame; anything else goes through the queue,
        which waits for the transport to drain (flow control) and keeps frames in order.
        """
        if self._out or len(data) > DIRECT_WRITE_MAX:
            return False
        transport = self.writer.transport
        if transport.is_closing() or transport.get_write_buffer_size():
            return False
        transport.write(data)
        self._last_write = self._loop.time()
        return True

    def send_message(self, data: bytes) -> None:
        if self._errored:
            return  # nothing follows an ERROR frame; the delivery goes back on close
        if self._write_through(data):
            return
        self.queued_messages += 1
        self._out_bytes += len(data)
        self._out.append((data, True))
        self._out_event.set()

    def send_frame(self, data: bytes) -> None:
        """Queue a control frame (RECEIPT, ERROR, CONNECTED): never subject to the limit."""
        if self._errored:
            return
        if self._write_through(data):
            return
        self._out_bytes += len(data)
        self._out.append((data, False))
        self._out_event.set()

    def next_ack_token(self) -> str:
        self._token += 1
        return f"{self.number}-{self._token}"

    def register(self, token: str, delivery: Delivery) -> None:
        self.tokens[token] = delivery

    def forget(self, token: str) -> None:
        self.tokens.pop(token, None)

    async def wait_room(self) -> None:
        while self.room() <= 0 and not self.closing:
            self._room_event.clear()
            await self._room_event.wait()

    def receipt(self, frame: Frame) -> None:
        rid = frame.get("receipt")
        if rid is not None:
            self.send_frame(encode_frame("RECEIPT", [("receipt-id", rid)], b"", self.version))

    def stop_reading(self) -> None:
        """Take no more frames (broker shutdown); work in flight still completes."""
        self.closing = True
        self._end_of_input()
        self._room_event.set()

    def _end_of_input(self) -> None:
        """Wake the read loop with end-of-input, the socket's reading paused first: bytes a
        client still sends would otherwise reach a reader told it has them all (asyncio's
        "feed_data after feed_eof", a transport torn down with an error)."""
        transport = cast(asyncio.Transport, self.writer.transport)  # a socket: it reads too
        with contextlib.suppress(RuntimeError, AttributeError):
            if not transport.is_closing() and transport.is_reading():
                transport.pause_reading()
        self.reader.feed_eof()

    def wake_writer(self) -> None:
        """Make the write loop look again at its heart-beat interval (after CONNECT)."""
        self._out_event.set()

    async def _write_loop(self) -> None:
        loop = self._loop
        try:
            while True:
                if not self._out:
                    if self._finished:
                        return
                    if self.closing:
                        self._end_of_input()  # wake the read loop
                    self._out_event.clear()
                    interval = self.send_interval
                    idle = loop.time() - self._last_write
                    try:
                        async with asyncio.timeout(max(interval - idle, 0.0) if interval else None):
                            await self._out_event.wait()
                    except TimeoutError:
                        if loop.time() - self._last_write >= interval:
                            self.writer.write(b"\n")  # heart-beat
                            self._last_write = loop.time()
                            await self.writer.drain()
                    continue
                chunk = list(self._out)
                self._out.clear()
                self._out_bytes = 0
                self._last_write = loop.time()
                self.writer.writelines([data for data, _ in chunk])
                await self.writer.drain()
                self._room_event.set()
                sent = sum(1 for _, is_msg in chunk if is_msg)
                if sent:
                    self.queued_messages -= sent
                    for c in self.consumers.values():
                        if c.dest is not None:
                            c.dest.kick()
        except (ConnectionError, OSError):
            self.closing = True
            self._room_event.set()

    # -- lifecycle --------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the connection until it closes."""
        writer_task = asyncio.get_running_loop().create_task(self._write_loop())
        try:
            await self._read_loop()
        finally:
            self.closing = True
            await self._cleanup()  # pipelined sends settle, and their receipts are queued
            self._finished = True
            self._out_event.set()
            try:
                async with asyncio.timeout(2.0):
                    await writer_task
            except (TimeoutError, Exception):
                writer_task.cancel()
            await close_after_output(self.reader, self.writer)

    async def _read_loop(self) -> None:
        cfg = self.broker.config
        # counted from the connection, not per read: trickled bytes do not extend it
        connect_by = self._loop.time() + cfg.connect_timeout
        while not self.closing:
            # A client that sends but does not read its replies waits here (TCP pushes back)
            # instead of growing the queue of RECEIPT frames without bound.
            while self._out_full(cfg.max_pending_frames, cfg.max_pending_bytes):
                self._room_event.clear()
                await self._room_event.wait()
            if not self.connected:
                timeout: float | None = max(connect_by - self._loop.time(), 0.0)
            else:
                timeout = self.recv_interval * cfg.heartbeat_grace if self.recv_interval else None
            try:
                if timeout is None:
                    data = await self.reader.read(65536)
                else:
                    async with asyncio.timeout(timeout):
                        data = await self.reader.read(65536)
            except TimeoutError:
                if self.connected:
                    what = f"heart-beat or frame received within {timeout:.1f} s"
                else:
                    what = (
                        f"CONNECT frame received within {cfg.connect_timeout:.1f} s of "
                        "connecting (connect_timeout): send the whole CONNECT frame first"
                    )
                self.error(f"no {what}; closing the connection")
                return
            except (ConnectionError, OSError):
                return
            if not data:
                return
            more = True
            while more:
                try:
                    frames = self.parser.feed(data)
                except TooLargeError as exc:
                    await self.settle_sends()  # the receipts of the frames before it come first
                    self.error(str(exc), level=logging.WARNING, receipt=exc.receipt)
                    return
                except FrameError as exc:
                    await self.settle_sends()
                    self.error(f"malformed frame: {exc}", receipt=exc.receipt)
                    return
                for frame in frames:
                    try:
                        await self.handle(frame)
                    except (ProtocolError, FrameError, MqstoreError) as exc:
                        await self.settle_sends()  # their receipts come before the ERROR
                        level = logging.WARNING if isinstance(exc, TooLargeError) else logging.INFO
                        self.error(self.refusal(exc), frame, level=level)
                        return
                    if self.closing:
                        return
                    if self.connected and not self.parser.accepted:
                        self.parser.accept()  # the frames after CONNECT: max_frame_size
                # Frames sent along with CONNECT are parsed once its version is known; a bad
                # frame after good ones is reported once those are acted on.
                more = bool(frames) and (
                    frames[-1].command in ("CONNECT", "STOMP") or self.parser.failed
                )
                data = b""

    def gone(self) -> bool:
        """Whether no frame after the one being handled will be acted on: the connection is
        closing, or its peer closed it (with nothing unread left) or reset it."""
        if self.closing:
            return True
        reader = self.reader
        return (
            reader.at_eof() or reader.exception() is not None or self.writer.transport.is_closing()
        )

    def _out_full(self, frames: int, size: int) -> bool:
        return (len(self._out) >= frames or self._out_bytes >= size) and not self.closing

    def error(
        self,
        message: str,
        frame: Frame | None = None,
        detail: str = "",
        level: int = logging.INFO,
        receipt: str | None = None,
    ) -> None:
        """Queue an ERROR frame and mark the connection for closing; log it at ``level``
        (WARNING: a refusal an operator may act on, such as a message over the size limit).
        Its ``receipt-id`` is the ``receipt`` of ``frame``, else ``receipt`` (the header of
        a frame that was not parsed whole)."""
        headers = [("message", message), ("content-type", "text/plain")]
        if frame is not None and frame.get("receipt") is not None:
            receipt = frame.headers["receipt"]
        if receipt is not None:
            headers.append(("receipt-id", receipt))
        log.log(level, "STOMP error to %s (%s): %s", self.peer, self.login or "-", message)
        body = (detail or message).encode("utf-8")
        self.send_frame(encode_frame("ERROR", headers, body, self.version))
        self._errored = True
        self.closing = True

    async def _cleanup(self) -> None:
        try:
            async with asyncio.timeout(self.broker.config.stop_timeout):
                while self.unsettled:
                    self._settled.clear()
                    await self._settled.wait()
        except TimeoutError:
            log.warning("connection %s closed with unsettled sends", self.peer)
        try:
            for tx in list(self.txs.values()):
                self.abort(tx)
            self.txs.clear()
            for consumer in list(self.consumers.values()):
                self.broker.unsubscribe(consumer)
            self.consumers.clear()
            self.broker.connection_closed(self)
        finally:
            self.detached.set()
