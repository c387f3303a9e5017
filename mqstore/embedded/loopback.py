"""A loopback TCP endpoint for the embedded PostgreSQL, for clients that cannot use its Unix
socket (the PostgreSQL JDBC driver, hence Spark, speaks TCP only).

The embedded server trusts whoever reaches its socket, and only its owner can: the socket
lives in the 0700 data directory. A port on 127.0.0.1 is open to every local user, so the
endpoint asks each connection for a password, a random token known only to the process that
opened the endpoint, before it passes the connection's startup message on to the socket.
It speaks just enough of the PostgreSQL protocol for that: it declines SSL and GSS
encryption (the bytes never leave the machine), asks for the password, and then relays
bytes both ways. Sessions it lets through are read-only by default
(``default_transaction_read_only``), a guard against a job writing to the store it reads.
"""

from __future__ import annotations

import contextlib
import hmac
import secrets
import socket
import struct
import threading
from urllib.parse import quote

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102
_MAX_STARTUP_BYTES = 10_000
_HANDSHAKE_TIMEOUT_S = 30.0
_READ_ONLY = "-c default_transaction_read_only=on"


class LoopbackEndpoint:
    """Listens on ``127.0.0.1`` (a free port) and relays password-checked connections to
    the Unix socket ``socket_path``, until :meth:`close`."""

    def __init__(self, socket_path: str, *, read_only: bool = True) -> None:
        self.socket_path = socket_path
        self.read_only = read_only
        self.password = secrets.token_urlsafe(32)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._guard = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="mqstore-loopback", daemon=True).start()

    def dsn(self, user: str = "postgres", database: str = "postgres") -> str:
        """A ``postgresql://`` DSN (with the password) for this endpoint."""
        return (
            f"postgresql://{quote(user, safe='')}:{self.password}@127.0.0.1:{self.port}/"
            f"{quote(database, safe='')}"
        )

    def close(self) -> None:
        """Stop listening and end every relayed connection."""
        with self._guard:
            self._closed = True
            sockets = [self._listener, *self._open]
            self._open.clear()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in accept or recv
            sock.close()

    def __enter__(self) -> LoopbackEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections ---------------------------------------------------------------------

    def _track(self, sock: socket.socket) -> bool:
        with self._guard:
            if self._closed:
                sock.close()
                return False
            self._open.add(sock)
            return True

    def _forget(self, sock: socket.socket) -> None:
        with self._guard:
            self._open.discard(sock)
        sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                return
            threading.Thread(
                target=self._relay, args=(client,), name="mqstore-loopback-conn", daemon=True
            ).start()

    def _relay(self, client: socket.socket) -> None:
        server: socket.socket | None = None
        try:
            client.settimeout(_HANDSHAKE_TIMEOUT_S)
            startup = self._handshake(client)
            if startup is None:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if not self._track(server):
                return
            server.connect(self.socket_path)
            server.sendall(startup)
            client.settimeout(None)
            back = threading.Thread(target=_pump, args=(server, client), daemon=True)
            back.start()
            _pump(client, server)
            back.join()
        except OSError:
            pass  # the client or the server went away: both ends are closed below
        finally:
            if server is not None:
                self._forget(server)
            self._forget(client)

    def _handshake(self, client: socket.socket) -> bytes | None:
        """Read the client's startup (declining encryption), check its password, and
        return the startup message to send on; None when the connection ends here."""
        for _ in range(3):  # at most an SSL and a GSS request come before the startup
            length = struct.unpack("!i", _read(client, 4))[0]
            if not 8 <= length <= _MAX_STARTUP_BYTES:
                return None
            body = _read(client, length - 4)
            code = struct.unpack("!i", body[:4])[0]
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                client.sendall(b"N")
                continue
            if code == _CANCEL_REQUEST:  # carries the session's secret key: pass it on
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
                    server.connect(self.socket_path)
                    server.sendall(struct.pack("!i", length) + body)
                return None
            if code >> 16 != 3:
                _refuse(client, "08P01", f"unsupported frontend protocol {code >> 16}")
                return None
            params = _parameters(body[4:])
            client.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
            kind = _read(client, 1)
            size = struct.unpack("!i", _read(client, 4))[0]
            if kind != b"p" or not 5 <= size <= _MAX_STARTUP_BYTES:
                _refuse(client, "08P01", "expected a password message")
                return None
            password = _read(client, size - 4).rstrip(b"\0")
            if not hmac.compare_digest(password, self.password.encode()):
                user = params.get("user", "")
                _refuse(client, "28P01", f'password authentication failed for user "{user}"')
                return None
            if self.read_only:
                params["options"] = f"{params.get('options', '')} {_READ_ONLY}".strip()
            return _startup_message(code, params)
        return None


def _read(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes (ConnectionError when the peer closes first)."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either end closes; then end both directions."""
    try:
        while chunk := source.recv(1 << 16):
            sink.sendall(chunk)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _parameters(data: bytes) -> dict[str, str]:
    fields = data.split(b"\0")
    pairs = fields[: len(fields) - len(fields) % 2]
    return {
        pairs[i].decode(errors="replace"): pairs[i + 1].decode(errors="replace")
        for i in range(0, len(pairs), 2)
        if pairs[i]
    }


def _startup_message(code: int, params: dict[str, str]) -> bytes:
    body = b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in params.items()) + b"\0"
    return struct.pack("!ii", len(body) + 8, code) + body


def _refuse(client: socket.socket, sqlstate: str, message: str) -> None:
    """Send a FATAL ErrorResponse, as the server would."""
    fields = b"SFATAL\0VFATAL\0C" + sqlstate.encode() + b"\0M" + message.encode() + b"\0\0"
    with contextlib.suppress(OSError):
        client.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
