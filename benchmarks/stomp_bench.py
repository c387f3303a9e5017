"""STOMP throughput of ``mqstore serve``, journaled and plain, on one PostgreSQL.

Workloads (persistent 1 KiB messages, a fresh queue per run):
  a  one producer, a receipt awaited for every SEND
  b  one producer, transactions of 100 (receipt on COMMIT)
  c  one consumer draining a pre-filled queue with client-individual ACKs
  d  one producer (as in a) and one consumer (as in c) at once
  e  8 producers and 8 consumers at once
  f  one durable topic subscriber draining a backlog with client-individual ACKs

Each mode runs ``mqstore serve`` as a child process on a fresh scratch database (created
on the server of ``--dsn``, dropped afterwards); the clients run here, over loopback.
Prints msg/s (median of ``--repeat`` runs), the rows inserted into ACTIVEMQ_MSGS per
message (counted by a statement trigger installed in the scratch database) and the CPU
time the ``mqstore serve`` process spent per message (user + system, from /proc).

    python benchmarks/stomp_bench.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stomppy_workloads

BODY = b"x" * 1024


class Client:
    """A minimal pipelining STOMP 1.2 client on asyncio streams."""

    def __init__(self) -> None:
        self.reader: asyncio.StreamReader
        self.writer: asyncio.StreamWriter
        self.receipts: dict[str, asyncio.Future[None]] = {}
        self.messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._n = 0

    async def open(self, port: int, client_id: str | None = None) -> Client:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        named = f"client-id:{client_id}\n" if client_id else ""
        connect = f"CONNECT\naccept-version:1.2\nhost:bench\nheart-beat:0,0\n{named}\n\x00"
        self.writer.write(connect.encode())
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


async def consume(port: int, dest: str, n: int, durable: str | None = None) -> None:
    c = await Client().open(port, durable)
    named = {"activemq.subscriptionName": durable} if durable else {}
    c.frame("SUBSCRIBE", {"destination": dest, "id": "1", "ack": "client-individual", **named})
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
    if name == "f":
        topic = f"/topic/{queue}"
        c = await Client().open(port, queue)
        named = {"activemq.subscriptionName": queue}
        await c.request("SUBSCRIBE", {"destination": topic, "id": "1", **named})
        await c.close()
        await produce(port, topic, n, tx=500)
        return await timed(lambda: consume(port, topic, n, durable=queue))
    per = n // 8
    jobs = [produce(port, dest, per) for _ in range(8)]
    jobs += [consume(port, dest, per) for _ in range(8)]
    return await timed(lambda: gather(*jobs))


async def gather(*aws: Awaitable[None]) -> None:
    await asyncio.gather(*aws)


async def timed(job: Callable[[], Awaitable[None]]) -> float:
    t0 = time.perf_counter()
    await job()
    return time.perf_counter() - t0


WORKLOADS = {
    "a": "a  send, receipt each (1 producer)",
    "b": "b  send in transactions of 100",
    "c": "c  drain, client-individual acks",
    "d": "d  1 producer + 1 consumer",
    "e": "e  8 producers + 8 consumers",
    "f": "f  durable topic drain, individual acks",
}


def workload_letters(text: str) -> str:
    """``--workloads``: letters of :data:`WORKLOADS` (commas between them allowed)."""
    letters = text.replace(",", "")
    unknown = sorted(set(letters) - set(WORKLOADS))
    if unknown or not letters:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(map(repr, unknown)) or 'none given'}: "
            f"give letters of {''.join(WORKLOADS)} (e.g. ad)"
        )
    return letters


COUNT_INSERTS = """
CREATE TABLE bench_rows (n bigint NOT NULL);
INSERT INTO bench_rows VALUES (0);
CREATE FUNCTION bench_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE bench_rows SET n = n + (SELECT count(*) FROM inserted); RETURN NULL; END $$;
CREATE TRIGGER bench_count AFTER INSERT ON activemq_msgs REFERENCING NEW TABLE AS inserted
FOR EACH STATEMENT EXECUTE FUNCTION bench_count();
"""


class ScratchDatabase:
    """A fresh migrated database that counts the rows inserted into ACTIVEMQ_MSGS."""

    def __init__(self, admin_dsn: str, tag: str) -> None:
        import psycopg
        from psycopg import sql
        from sqlalchemy.engine import make_url

        from mqstore import migrate
        from mqstore.db import create_engine, libpq_dsn

        self.name = f"mqs_stomp_bench_{tag}_{os.getpid()}"
        self.admin = libpq_dsn(admin_dsn)
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        url = make_url(self.admin).set(drivername="postgresql+psycopg", database=self.name)
        self.dsn = url.render_as_string(hide_password=False)
        engine = create_engine(self.dsn)
        migrate.upgrade(engine)
        engine.dispose()
        with psycopg.connect(libpq_dsn(self.dsn), autocommit=True) as conn:
            conn.execute(COUNT_INSERTS)

    def rows_inserted(self) -> int:
        import psycopg

        from mqstore.db import libpq_dsn

        with psycopg.connect(libpq_dsn(self.dsn)) as conn:
            row = conn.execute("SELECT n FROM bench_rows").fetchone()
        return int(row[0]) if row else 0

    def drop(self) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )


class Server:
    """``mqstore serve`` in a child process on a free port."""

    def __init__(self, dsn: str, journal: bool, data_dir: Path, *, lock: str = "none",
                 name: str | None = None, wait: bool = True) -> None:  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        cmd = [sys.executable, "-m", "mqstore", "serve", "--dsn", dsn, "--lock", lock,
               "--stomp", f"127.0.0.1:{self.port}", "--data-dir", str(data_dir),
               "--log-level", "WARNING"]  # fmt: skip
        if name:
            cmd += ["--broker-name", name]
        if not journal:
            cmd.append("--no-journal")
        env = {**os.environ, "MQSTORE_CLEANUP_INTERVAL_S": "0"}
        self.log = (data_dir / "serve.log").open("ab")
        self.process = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while wait and time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mqstore serve exited; see {data_dir / 'serve.log'}")
            if self.serving():
                return
            time.sleep(0.1)
        if wait:
            raise TimeoutError("mqstore serve did not start")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the ``mqstore serve`` process so far (Linux /proc)."""
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def serving(self) -> bool:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2),
        ):
            return True
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
        self.log.close()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)


#: (workload, msg/s, rows inserted per message, broker CPU µs per message or NaN)
Result = tuple[str, float, float, float]


async def bench_mode(
    args: argparse.Namespace,
    mode: str,
    port: int,
    rows: Callable[[], int],
    *,
    settle: bool,
    cpu: Callable[[], float] | None = None,
) -> list[Result]:
    """Run every workload ``args.repeat`` times against one server (``settle``: wait for the
    journal's checkpoint before counting rows; ``cpu``: the broker's CPU seconds so far)."""
    results = []
    for name in args.workloads:
        rates, per_msg, cpu_us = [], [], []
        for rep in range(args.repeat):
            before = rows()
            cpu_before = cpu() if cpu is not None else 0.0
            queue = f"bench.{mode}.{name}.{rep}"
            if args.client == "stomp.py":
                secs = await asyncio.to_thread(
                    stomppy_workloads.run_workload, name, port, args.messages, queue
                )
            else:
                secs = await run_workload(name, port, args.messages, queue)
            n = args.messages if name != "e" else (args.messages // 8) * 8
            if settle:
                await asyncio.sleep(1.5)  # let the checkpoint write what survived
            rates.append(n / secs)
            per_msg.append((rows() - before) / n)
            cpu_us.append((cpu() - cpu_before) / n * 1e6 if cpu is not None else math.nan)
        result = (
            name,
            statistics.median(rates),
            statistics.median(per_msg),
            statistics.median(cpu_us),
        )
        results.append(result)
        cpu_note = "" if math.isnan(result[3]) else f", {result[3]:.0f} µs broker CPU/msg"
        print(f"  {mode} {name}: {result[1]:.0f} msg/s, {result[2]:.3f} rows/msg{cpu_note}",
              flush=True)  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--modes", default="journaled,plain")
    parser.add_argument("--workloads", type=workload_letters, default="abcde")
    parser.add_argument(
        "--client",
        choices=["stomp.py", "asyncio"],
        default="stomp.py",
        help="stomp.py threads (as applications) or the pipelining asyncio client",
    )
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn (or set MQSTORE_TEST_DSN)")
    print(
        f"# stomp_bench: {args.messages} x 1 KiB persistent messages, median of "
        f"{args.repeat}; mqstore serve in a child process, {args.client} clients here"
    )
    print(
        f"# machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    table: dict[str, list[Result]] = {}
    for mode in args.modes.split(","):
        db = ScratchDatabase(args.dsn, mode)
        with tempfile.TemporaryDirectory(prefix="mqs-bench-") as tmp:
            server = Server(db.dsn, mode == "journaled", Path(tmp))
            try:
                table[mode] = asyncio.run(
                    bench_mode(
                        args,
                        mode,
                        server.port,
                        db.rows_inserted,
                        settle=mode == "journaled",
                        cpu=server.cpu_seconds,
                    )
                )
            finally:
                server.stop()
                db.drop()
    modes = list(table)
    print(
        f"{'workload':<40}"
        + "".join(f" {m + ' msg/s':>16} {'rows/msg':>9} {'CPU µs/msg':>11}" for m in modes)
    )
    for i, name in enumerate(args.workloads):
        line = f"{WORKLOADS[name]:<40}"
        for m in modes:
            _, rate, per, cpu_us = table[m][i]
            line += f" {rate:>16.0f} {per:>9.3f} {cpu_us:>11.0f}"
        print(line)


if __name__ == "__main__":
    main()
