"""STOMP broker throughput on PostgresStore (or the in-memory store with ``--memory``).

Workloads (persistent 1 KiB messages, one queue per run):
  a  one producer, a receipt awaited for every SEND
  b  one producer, transactions of 100 (receipt on COMMIT)
  c  one consumer draining a pre-filled queue with client-individual ACKs
  d  one producer (as in a) and one consumer (as in c) at once
  e  8 producers and 8 consumers at once

Prints msg/s (median of ``--repeat`` runs) and ACTIVEMQ_MSGS rows written per message.
The broker runs in-process on a fresh database created on the server of ``--dsn``.

    python benchmarks/stomp_bench.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqstore.broker import Broker, BrokerConfig
from mqstore.broker.memory_store import MemoryStore
from mqstore.store.model import Batch, NewMessage
from mqstore.store.port import Store

BODY = b"x" * 1024


class CountingStore:
    """Delegates to a store and counts the message rows handed to it for insertion."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.rows = 0
        self._lock = threading.Lock()

    def add(self, messages: Sequence[NewMessage]) -> list[int]:
        with self._lock:
            self.rows += len(messages)
        return self.inner.add(messages)

    def commit(self, batch: Batch) -> list[int]:
        with self._lock:
            self.rows += len(batch.adds)
        return self.inner.commit(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Client:
    """A minimal pipelining STOMP 1.2 client on asyncio streams."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter
        self.receipts: dict[str, asyncio.Future[None]] = {}
        self.messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._n = 0

    async def open(self, port: int) -> Client:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer.write(b"CONNECT\naccept-version:1.2\nhost:bench\nheart-beat:0,0\n\n\x00")
        head, _ = await self._frame()
        assert head.startswith("CONNECTED"), head
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def _frame(self) -> tuple[str, dict[str, str]]:
        raw = await self.reader.readuntil(b"\n\n")
        text = raw.decode().lstrip("\n")
        lines = text.split("\n")
        headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
        if "content-length" in headers:
            await self.reader.readexactly(int(headers["content-length"]) + 1)
        else:
            await self.reader.readuntil(b"\x00")
        return lines[0], headers

    async def _loop(self) -> None:
        try:
            while True:
                cmd, headers = await self._frame()
                if cmd == "RECEIPT":
                    fut = self.receipts.pop(headers["receipt-id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
                elif cmd == "MESSAGE":
                    self.messages.put_nowait(headers)
                elif cmd == "ERROR":
                    print("ERROR from broker:", headers.get("message"), file=sys.stderr)
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    def _receipt(self) -> tuple[str, asyncio.Future[None]]:
        self._n += 1
        rid = str(self._n)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.receipts[rid] = fut
        return rid, fut

    def frame(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        head = "".join(f"{k}:{v}\n" for k, v in headers.items())
        if body:
            head += f"content-length:{len(body)}\n"
        self.writer.write(f"{command}\n{head}\n".encode() + body + b"\x00")

    async def request(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        rid, fut = self._receipt()
        self.frame(command, {**headers, "receipt": rid}, body)
        await fut

    async def close(self) -> None:
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(self.request("DISCONNECT", {}), 5)
        if self._task is not None:
            self._task.cancel()
        self.writer.close()


SEND = {"persistent": "true"}


async def produce(port: int, dest: str, n: int, tx: int = 0) -> None:
    c = await Client().open(port)
    headers = {"destination": dest, **SEND}
    if tx:
        for start in range(0, n, tx):
            tid = f"t{start}"
            c.frame("BEGIN", {"transaction": tid})
            for _ in range(min(tx, n - start)):
                c.frame("SEND", {**headers, "transaction": tid}, BODY)
            await c.request("COMMIT", {"transaction": tid})
    else:
        for _ in range(n):
            await c.request("SEND", headers, BODY)
    await c.close()


async def consume(port: int, dest: str, n: int) -> None:
    c = await Client().open(port)
    c.frame("SUBSCRIBE", {"destination": dest, "id": "1", "ack": "client-individual"})
    for i in range(n):
        headers = await c.messages.get()
        if i == n - 1:
            await c.request("ACK", {"id": headers["ack"]})
        else:
            c.frame("ACK", {"id": headers["ack"]})
    await c.close()


async def run_workload(name: str, port: int, n: int, queue: str) -> float:
    dest = f"/queue/{queue}"
    if name == "a":
        return await timed(lambda: produce(port, dest, n))
    if name == "b":
        return await timed(lambda: produce(port, dest, n, tx=100))
    if name == "c":
        await produce(port, dest, n, tx=500)
        return await timed(lambda: consume(port, dest, n))
    if name == "d":
        return await timed(lambda: gather(produce(port, dest, n), consume(port, dest, n)))
    per = n // 8
    jobs = [produce(port, dest, per) for _ in range(8)]
    jobs += [consume(port, dest, per) for _ in range(8)]
    return await timed(lambda: gather(*jobs), n=per * 8)


async def gather(*aws: Awaitable[None]) -> None:
    await asyncio.gather(*aws)


async def timed(job: Callable[[], Awaitable[None]], n: int | None = None) -> float:
    t0 = time.perf_counter()
    await job()
    return time.perf_counter() - t0


def make_store(args: argparse.Namespace) -> tuple[Store, Callable[[], None]]:
    if args.memory:
        mem = MemoryStore()
        return mem, lambda: None
    import psycopg
    from psycopg import sql

    from mqstore import migrate
    from mqstore.db import create_engine, libpq_dsn
    from mqstore.store.postgres import PostgresStore

    name = f"mqs_bench_{os.getpid()}"
    admin = libpq_dsn(args.dsn)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    from sqlalchemy.engine import make_url

    url = make_url(args.dsn).set(drivername="postgresql+psycopg", database=name)
    engine = create_engine(url.render_as_string(hide_password=False))
    migrate.upgrade(engine)
    store = PostgresStore(engine, cleanup_interval_s=0)

    def drop() -> None:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    return store, drop


async def main_async(args: argparse.Namespace) -> None:
    inner, drop = make_store(args)
    store = CountingStore(inner)
    inner.start()
    broker = Broker(store, BrokerConfig(heartbeat_ms=(0, 0)))
    await broker.start("127.0.0.1", 0)
    try:
        print(
            f"# stomp_bench: {args.messages} x 1 KiB persistent messages, median of {args.repeat}"
        )
        print(f"# store: {'memory' if args.memory else 'PostgresStore'}; "
              f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
              f"Python {platform.python_version()}")  # fmt: skip
        print(f"{'workload':<44} {'msg/s':>10} {'rows/msg':>9}")
        for name in args.workloads:
            rates, rows = [], []
            for rep in range(args.repeat):
                before = store.rows
                secs = await run_workload(name, broker.port, args.messages, f"bench.{name}.{rep}")
                n = args.messages if name != "e" else (args.messages // 8) * 8
                rates.append(n / secs)
                rows.append((store.rows - before) / n)
            label = WORKLOADS[name]
            print(f"{label:<44} {statistics.median(rates):>10.0f} {statistics.median(rows):>9.2f}")
    finally:
        await broker.stop()
        inner.stop()
        drop()


WORKLOADS = {
    "a": "a  send, receipt each (1 producer)",
    "b": "b  send in transactions of 100",
    "c": "c  drain, client-individual acks",
    "d": "d  1 producer + 1 consumer",
    "e": "e  8 producers + 8 consumers",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory", action="store_true", help="use the in-memory store")
    parser.add_argument("--workloads", default="abcde")
    args = parser.parse_args()
    if not args.memory and not args.dsn:
        parser.error("give --dsn (or set MQSTORE_TEST_DSN), or --memory")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
