"""STOMP command handlers (mixed into :class:`~mqstore.broker.protocol.Connection`): each
inbound frame to its command's handler, and the session's CONNECT and DISCONNECT; SEND and
transactions are in :mod:`~mqstore.broker.send_handlers`, SUBSCRIBE and acknowledgements in
:mod:`~mqstore.broker.subscription_handlers`."""

from __future__ import annotations

import asyncio
import hmac
import logging

from mqstore.broker.frames import Frame, encode_frame
from mqstore.broker.handler_state import protocol_error
from mqstore.broker.send_handlers import SendHandlers
from mqstore.broker.subscription_handlers import SubscriptionHandlers

log = logging.getLogger(__name__)


class Handlers(SendHandlers, SubscriptionHandlers):
    """Frame handling; the state lives in the connection."""

    async def handle(self, frame: Frame) -> None:
        """Act on one inbound frame."""
        cmd = frame.command
        if not self.connected:
            if cmd not in ("CONNECT", "STOMP"):
                raise protocol_error(f"expected a CONNECT frame, got {cmd}")
            await self.on_connect(frame)
            return
        if cmd in ("CONNECT", "STOMP"):
            raise protocol_error("already connected: a second CONNECT is not allowed")
        if not (cmd == "SEND" and frame.get("transaction") is None):
            await self.settle_sends()
        handler = getattr(self, "on_" + cmd.lower())
        await handler(frame)

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
                raise protocol_error(
                    f"no supported protocol version in {accepted!r}; use 1.0, 1.1, 1.2"
                )
            version = common[0]
        self.version = version
        self.parser.version = version
        login = frame.get("login")
        self.login = login
        if cfg.users is not None and not _authentic(cfg.users, login, frame.get("passcode")):
            log.warning("authentication failed for login %r from %s", login, self.peer)
            raise protocol_error("authentication failed: invalid login or passcode")
        client_id = frame.get("client-id")
        if client_id:
            if not self.broker.claim_client_id(client_id, self):
                raise protocol_error(
                    f"client-id {client_id!r} is already connected; use another one"
                )
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

    async def on_disconnect(self, frame: Frame) -> None:
        if self.settling and frame.get("receipt") is not None:
            # Its receipt says every frame before it is done: the acks sent without one too.
            await asyncio.wait(list(self.settling))
        self.receipt(frame)
        self.closing = True


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
        raise protocol_error(
            f"malformed heart-beat header {text!r}; expected two integers"
        ) from None
    if cx < 0 or cy < 0:
        raise protocol_error("heart-beat values must not be negative")
    return cx, cy
