"""Small synchronous STOMP helpers shared by the interop tests and the head-to-head benchmark."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import stomp


@dataclass
class Received:
    """A MESSAGE frame as a client sees it."""

    headers: dict[str, str]
    body: bytes


@dataclass
class Inbox(stomp.ConnectionListener):  # type: ignore[misc]
    """Collects frames and wakes waiters."""

    messages: list[Received] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def on_message(self, frame: Any) -> None:
        body = frame.body if isinstance(frame.body, bytes) else frame.body.encode()
        with self.cond:
            self.messages.append(Received(dict(frame.headers), body))
            self.cond.notify_all()

    def on_error(self, frame: Any) -> None:
        with self.cond:
            self.errors.append(f"{frame.headers.get('message')}: {frame.body}")
            self.cond.notify_all()

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.messages) < count and not self.errors:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
        assert not self.errors, self.errors
        return list(self.messages)


def connect(port: int, client_id: str | None = None) -> tuple[stomp.Connection12, Inbox]:
    """A STOMP 1.2 connection that sends bodies as given (text unless content-length is set)."""
    conn = stomp.Connection12(
        [("127.0.0.1", port)], auto_content_length=False, auto_decode=False, heartbeats=(0, 0)
    )
    inbox = Inbox()
    conn.set_listener("inbox", inbox)
    conn.connect(wait=True, headers={"client-id": client_id} if client_id else {})
    return conn, inbox


def send(
    conn: stomp.Connection12,
    destination: str,
    body: bytes | str,
    *,
    receipt: str | None = None,
    **headers: str,
) -> None:
    """A persistent SEND (receipt-confirmed when ``receipt`` is given)."""
    hdrs = {"persistent": "true", **{k.replace("_", "-"): v for k, v in headers.items()}}
    if receipt:
        hdrs["receipt"] = receipt
    conn.send(destination, body, headers=hdrs)


def receive(
    port: int,
    destination: str,
    count: int,
    *,
    client_id: str | None = None,
    subscription: str | None = None,
    ack_first: int | None = None,
    timeout: float = 15.0,
    settle: float = 0.5,
) -> list[Received]:
    """Subscribe (client-individual), wait for ``count`` messages (and ``settle`` s for extras),
    acknowledge the first ``ack_first`` (all when None), disconnect."""
    conn, inbox = connect(port, client_id)
    headers = {"activemq.prefetchSize": "1000"}
    if subscription:
        headers["activemq.subscriptionName"] = subscription
    conn.subscribe(destination, id="1", ack="client-individual", headers=headers)
    got = inbox.wait_for(count, timeout)
    time.sleep(settle)
    got = list(inbox.messages)
    for message in got[: len(got) if ack_first is None else ack_first]:
        conn.ack(message.headers["ack"])
    time.sleep(0.3)
    conn.disconnect(receipt="bye")
    return got
