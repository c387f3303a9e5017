"""The STOMP listener (mixed into :class:`~mqstore.broker.server.Broker`): the listening
socket, a :class:`~mqstore.broker.protocol.Connection` served for each client it accepts,
a client past ``max_connections`` turned away, and the connections closed at shutdown."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator
from typing import Any

from mqstore.broker.closing import close_after_output
from mqstore.broker.config import BrokerConfig
from mqstore.broker.frames import encode_frame
from mqstore.broker.protocol import Connection

log = logging.getLogger(__name__)

#: Seconds a TLS client has to finish its handshake before the connection is dropped.
TLS_HANDSHAKE_S = 10.0


class Listener:
    """Accepting and serving client connections; the state lives in the broker."""

    config: BrokerConfig
    port: int
    connections: set[Connection]
    refused_connections: int  # turned away past max_connections
    _server: asyncio.Server | None
    _conn_tasks: set[asyncio.Task[None]]
    _conn_numbers: Iterator[int]

    def _init_listener(self) -> None:
        """Not listening yet; no connection."""
        self.connections = set()
        self.refused_connections = 0
        self.port = 0
        self._server = None
        self._conn_tasks = set()
        self._conn_numbers = itertools.count(1)

    async def _listen(self, host: str, port: int) -> None:
        """Listen on ``host:port`` (``port`` 0: any free one, then in ``self.port``)."""
        tls: dict[str, Any] = {}
        if self.config.tls is not None:  # uvloop refuses a handshake timeout without TLS
            tls = {"ssl": self.config.tls, "ssl_handshake_timeout": TLS_HANDSHAKE_S}
        self._server = await asyncio.start_server(self._accept, host, port, **tls)
        self.port = self._server.sockets[0].getsockname()[1]

    def _stop_accepting(self) -> None:
        """Close the listening socket; the connections read no more frames."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.stop_reading()

    async def _close_connections(self) -> None:
        """Let the connections finish their in-flight work (for at most ``stop_timeout``),
        then cancel those still running."""
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=self.config.stop_timeout)
        for task in list(self._conn_tasks):
            task.cancel()

    async def _closed(self) -> None:
        """Wait until the listening socket is closed."""
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limit = self.config.max_connections
        if limit and len(self.connections) >= limit:
            await self._refuse(reader, writer, limit)
            return
        conn = Connection(self, reader, writer, next(self._conn_numbers))  # type: ignore[arg-type]
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
                connect = await reader.readuntil(b"\0")  # or whatever comes first
                version = _offered_version(connect)
                writer.write(encode_frame("ERROR", headers, message.encode(), version))
                await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        await close_after_output(reader, writer)


def _offered_version(connect: bytes) -> str:
    """The STOMP version a CONNECT frame would be served in (as CONNECT negotiates it), so
    that an ERROR answering it escapes its headers as that version does (1.0: not at all)."""
    for raw in connect.lstrip(b"\r\n").split(b"\n")[1:]:  # heart-beat EOLs may come first
        line = raw.rstrip(b"\r")
        if not line:
            break  # the end of its headers
        if line.startswith(b"accept-version:"):
            offered = {v.strip() for v in line[len(b"accept-version:") :].split(b",")}
            return next((v.decode() for v in (b"1.2", b"1.1") if v in offered), "1.0")
    return "1.0"
