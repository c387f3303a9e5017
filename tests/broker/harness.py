"""Run a Broker on its own event loop thread, and stomp.py helpers, for the broker tests."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import stomp

from mqstore.broker import Broker, BrokerConfig, eventloop
from mqstore.store.port import Store


class BrokerThread:
    """A broker serving on 127.0.0.1 (port 0) from a background event loop."""

    def __init__(self, store: Store, config: BrokerConfig | None = None) -> None:
        self.store = store
        self.config = config or BrokerConfig(heartbeat_ms=(0, 0))
        self.loop = eventloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker: Broker | None = None

    def call(self, coro: Any, timeout: float = 20.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> BrokerThread:
        self.broker = Broker(self.store, self.config)
        self.call(self.broker.start("127.0.0.1", 0))
        return self

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    def stop(self) -> None:
        if self.broker is not None:
            self.call(self.broker.stop())
            self.broker = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def snapshot(self) -> dict[str, Any]:
        assert self.broker is not None
        broker = self.broker

        async def snap() -> dict[str, Any]:
            return broker.snapshot()

        result: dict[str, Any] = self.call(snap())
        return result

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@contextmanager
def running(store: Store, **config: Any) -> Iterator[BrokerThread]:
    """A started broker on ``store`` with these BrokerConfig fields (no heart-beats)."""
    bt = BrokerThread(store, BrokerConfig(heartbeat_ms=(0, 0), **config)).start()
    try:
        yield bt
    finally:
        bt.close()


class Collector(stomp.ConnectionListener):  # type: ignore[misc]
    """Records MESSAGE, RECEIPT and ERROR frames; waits for them with timeouts."""

    def __init__(self, on_message: Callable[[Any], None] | None = None) -> None:
        self.messages: list[Any] = []
        self.errors: list[Any] = []
        self.receipts: list[str] = []
        self.disconnected = threading.Event()
        self.cond = threading.Condition()
        self.on_message_hook = on_message

    def on_message(self, frame: Any) -> None:
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()
        if self.on_message_hook is not None:
            self.on_message_hook(frame)

    def on_error(self, frame: Any) -> None:
        with self.cond:
            self.errors.append(frame)
            self.cond.notify_all()

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.append(frame.headers["receipt-id"])
            self.cond.notify_all()

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def wait(self, pred: Callable[[], bool], timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def wait_messages(self, n: int, timeout: float = 10.0) -> list[Any]:
        assert self.wait(lambda: len(self.messages) >= n, timeout), (
            f"expected {n} messages, got {len(self.messages)}"
        )
        return list(self.messages)

    def bodies(self) -> list[str]:
        return [m.body for m in self.messages]


def connect(
    port: int,
    *,
    version: str = "1.2",
    client_id: str | None = None,
    login: str | None = None,
    passcode: str | None = None,
    listener: Collector | None = None,
) -> tuple[Any, Collector]:
    """A connected stomp.py client and its collector."""
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    conn = cls([("127.0.0.1", port)], auto_content_length=False)
    col = listener or Collector()
    conn.set_listener("c", col)
    headers = {"client-id": client_id} if client_id else {}
    conn.connect(login, passcode, wait=True, headers=headers)
    return conn, col


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, step: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def drain(port: int, destination: str) -> list[str]:
    """Bodies of everything an auto-ack subscriber gets until nothing arrives for 2 s."""
    conn, client = connect(port)
    conn.subscribe(destination, id="1", ack="auto")
    seen = -1
    while seen != len(client.messages):
        seen = len(client.messages)
        client.wait(lambda n=seen: len(client.messages) > n, 2.0)
    bodies = [m.body for m in client.messages]
    conn.disconnect()
    return bodies


class HeldCommit:
    """Holds the next ``store.commit`` that ``when`` picks, once armed, until ``hold`` is set
    (``held`` is set as it starts waiting): store work queued behind it piles up."""

    def __init__(
        self, store: Any, monkeypatch: Any, when: Callable[[Any], bool] = lambda _batch: True
    ) -> None:
        self.hold, self.held = threading.Event(), threading.Event()
        self.armed = False
        real = store.commit

        def commit(batch: Any) -> list[int]:
            if self.armed and when(batch):
                self.armed = False
                self.held.set()
                self.hold.wait(10)
            return list(real(batch))

        monkeypatch.setattr(store, "commit", commit)


def read_frame(sock: socket.socket) -> bytes:
    """Bytes from a raw socket up to and including the end of one frame (a NUL)."""
    data = b""
    while b"\x00" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data
