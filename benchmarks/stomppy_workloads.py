"""Workloads (a)-(f) driven by stomp.py clients, one thread per client, as users run them.

The asyncio client in stomp_bench.py pipelines frames with little overhead of its own; these
use stomp.py 1.2 connections exactly as an application would, so client cost is included.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import stomp

BODY = b"x" * 1024
SEND = {"persistent": "true", "content-type": "text/plain"}


class _Listener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.receipts: set[str] = set()
        self.messages: list[Any] = []
        self.on_msg: Any = None

    def on_receipt(self, frame: Any) -> None:
        with self.cond:
            self.receipts.add(frame.headers["receipt-id"])
            self.cond.notify_all()

    def on_message(self, frame: Any) -> None:
        if self.on_msg is not None:
            self.on_msg(frame)

    def wait_receipt(self, rid: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while rid not in self.receipts:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no receipt {rid}")
                self.cond.wait(left)
            self.receipts.discard(rid)


def _connect(port: int, client_id: str | None = None) -> tuple[stomp.Connection12, _Listener]:
    conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), auto_decode=False)
    listener = _Listener()
    conn.set_listener("l", listener)
    conn.connect(wait=True, headers={"client-id": client_id} if client_id else {})
    return conn, listener


def produce(port: int, dest: str, n: int, tx: int = 0) -> None:
    conn, lst = _connect(port)
    if tx:
        for start in range(0, n, tx):
            tid = f"t{start}"
            conn.begin(tid)
            for _ in range(min(tx, n - start)):
                conn.send(dest, BODY, headers={**SEND, "transaction": tid})
            conn.commit(tid, receipt=f"c{start}")
            lst.wait_receipt(f"c{start}")
    else:
        for i in range(n):
            conn.send(dest, BODY, headers=SEND, receipt=f"r{i}")
            lst.wait_receipt(f"r{i}")
    conn.disconnect()


def consume(port: int, dest: str, n: int, durable: str | None = None) -> None:
    """Receive ``n`` messages, acking each; ``durable``: as that durable subscription."""
    conn, lst = _connect(port, durable)
    done = threading.Event()
    count = 0

    def on_msg(frame: Any) -> None:
        nonlocal count
        if count >= n:  # one too many: left unacknowledged, so it goes to another consumer
            return
        count += 1
        conn.ack(frame.headers["ack"])
        if count >= n:
            done.set()

    lst.on_msg = on_msg
    named = {"activemq.subscriptionName": durable} if durable else {}
    conn.subscribe(dest, id="1", ack="client-individual", headers=named)
    if not done.wait(600):
        raise TimeoutError(f"consumer got {count} of {n}")
    conn.disconnect(receipt="bye")


def _threads(jobs: list[tuple[Any, tuple[Any, ...]]]) -> None:
    errors: list[BaseException] = []

    def run(fn: Any, args: tuple[Any, ...]) -> None:
        try:
            fn(*args)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def subscribe_durable(port: int, topic: str, name: str) -> None:
    """Create the durable subscription ``name`` on ``topic`` and go away."""
    conn, _ = _connect(port, name)
    conn.subscribe(topic, id="1", ack="client-individual",
                   headers={"activemq.subscriptionName": name})  # fmt: skip
    conn.disconnect(receipt="bye")


def run_workload(name: str, port: int, n: int, queue: str) -> float:
    """Seconds the workload took (the pre-fill of (c) and (f) is not timed)."""
    dest = f"/queue/{queue}"
    if name == "c":
        produce(port, dest, n, tx=500)
    if name == "f":
        dest = f"/topic/{queue}"
        subscribe_durable(port, dest, queue)
        produce(port, dest, n, tx=500)
    start = time.perf_counter()
    if name == "a":
        produce(port, dest, n)
    elif name == "b":
        produce(port, dest, n, tx=100)
    elif name == "c":
        consume(port, dest, n)
    elif name == "d":
        _threads([(produce, (port, dest, n)), (consume, (port, dest, n))])
    elif name == "f":
        consume(port, dest, n, durable=queue)
    else:
        per = n // 8
        _threads([(produce, (port, dest, per)) for _ in range(8)]
                 + [(consume, (port, dest, per)) for _ in range(8)])  # fmt: skip
    return time.perf_counter() - start
