"""Closing a client's socket so that what the broker wrote reaches the client."""

from __future__ import annotations

import asyncio

#: At most this long, a socket the broker closes reads (and drops) what its peer still
#: sends after the broker ended its output, before it is closed for good.
CLOSE_LINGER_S = 2.0


async def close_after_output(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, linger: float = CLOSE_LINGER_S
) -> None:
    """Close ``writer``'s socket so that what was written reaches the peer.

    Closing a socket with input left unread makes the kernel reset the connection and drop
    the output it has not sent yet: a client pipelining SENDs lost the ERROR that refused
    one. So when the peer has not closed its side, end the output first (the peer reads
    everything, then end-of-file) and drop what it still sends until it closes, for at most
    ``linger`` seconds. (A TLS connection cannot end its output alone: it is closed at once.)
    Then the output left is sent as long as the peer takes some of it every ``linger``
    seconds; a peer that stopped reading is dropped with the rest (else its socket and
    buffer would be held for ever).
    """
    try:
        open_both_ways = not (writer.transport.is_closing() or reader.at_eof())
        if open_both_ways and writer.can_write_eof():
            writer.write_eof()
            async with asyncio.timeout(linger):
                while await reader.read(65536):
                    pass
    except (TimeoutError, ConnectionError, OSError):
        pass
    try:
        writer.close()
        await _closed(writer, linger)
    except Exception:
        pass


async def _closed(writer: asyncio.StreamWriter, linger: float) -> None:
    """Wait until ``writer``'s socket is closed, while its unsent output shrinks at least
    every ``linger`` seconds; abort it (dropping that output) once it does not."""
    transport = writer.transport
    left = transport.get_write_buffer_size()
    while True:
        try:
            async with asyncio.timeout(linger):
                await writer.wait_closed()
            return
        except TimeoutError:
            now = transport.get_write_buffer_size()
            if not 0 < now < left:
                transport.abort()
                return
            left = now
