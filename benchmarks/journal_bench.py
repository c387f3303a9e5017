"""Journaled store vs plain PostgresStore: producers and a consumer running concurrently.

Workload: ``--messages`` (20 000) messages of 1 KiB to one queue, sent by ``--producers``
threads in transactions of ``--batch`` messages (``commit``), while one consumer thread pages
the queue and removes what it read (500 per page). "slow" starts the consumer 1.5 s (untimed)
after every message was sent, so a checkpoint has written them first. Journal sync policy
``always``. Prints msg/s, ACTIVEMQ_MSGS rows written per message, and fsyncs per message
(journal fdatasyncs; PostgreSQL WAL syncs from ``pg_stat_wal``). Creates and drops a scratch
database. Run from the repository root::

    .venv/bin/python benchmarks/journal_bench.py [--dsn postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg
import sqlalchemy as sa
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journal.store import JournaledStore
from mqstore import migrate
from mqstore.db import create_engine, libpq_dsn
from mqstore.store import Batch, NewMessage, PostgresStore, Store

Q = "queue://bench"
BODY = os.urandom(1024)
SLOW_DELAY = 1.5  # seconds; more than the default 1 s checkpoint interval, not timed


def wal_syncs(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT wal_sync FROM pg_stat_wal")).scalar_one())


def workload(store: Store, n: int, producers: int, batch: int, slow: bool) -> float:
    """Seconds until every message was produced and consumed."""
    per = n // producers
    done_producing = threading.Event()

    def produce(p: int) -> None:
        for start in range(0, per, batch):
            store.commit(
                Batch(
                    adds=[
                        NewMessage(Q, f"ID:bench-{p}", s, BODY)
                        for s in range(start, min(per, start + batch))
                    ]
                )
            )

    def consume() -> None:
        if slow:  # messages outlive a checkpoint before anyone reads them
            done_producing.wait()
            time.sleep(SLOW_DELAY)
        got = 0
        while got < per * producers:
            page = store.page(Q, None, 500)
            if not page:
                time.sleep(0.001)
                continue
            got += store.remove(Q, [m.id for m in page])

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    consumer = threading.Thread(target=consume)
    began = time.perf_counter()
    consumer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done_producing.set()
    consumer.join()
    return time.perf_counter() - began - (SLOW_DELAY if slow else 0.0)


def run(dsn: str, journaled: bool, args: argparse.Namespace, slow: bool) -> dict[str, float]:
    admin = libpq_dsn(dsn)
    name = f"mqs_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = sa.make_url(dsn).set(drivername="postgresql+psycopg", database=name)
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        migrate.upgrade(engine)
        pg = PostgresStore(engine, cleanup_interval_s=0, history=args.history)
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            store: Store
            if journaled:
                store = JournaledStore(pg, tmp, sync_policy="always", shared_lock=False)
            else:
                store = pg
            store.start()
            wal0 = wal_syncs(engine)
            seconds = workload(store, args.messages, args.producers, args.batch, slow)
            if isinstance(store, JournaledStore):
                store.checkpoint()  # the final checkpoint counts: rows written, elided
            counters = store.stats().counters
            wal = wal_syncs(engine) - wal0
            store.stop()
        n = args.messages
        written = counters["written"] if journaled else counters["added"]
        jfs = counters.get("journal_fsyncs", 0.0)
        return {
            "msg/s": n / seconds,
            "rows/msg": written / n,
            "journal fsyncs/msg": jfs / n,
            "pg wal syncs/msg": wal / n,
            "elided %": 100.0 * counters.get("elided", 0.0) / n,
            "checkpoints": counters.get("checkpoints", 0.0),
        }
    finally:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--dir", default=None, help="journal parent directory (target disk)")
    parser.add_argument("--no-history", dest="history", action="store_false")
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn or set MQSTORE_TEST_DSN")
    logging.basicConfig(level=logging.WARNING)
    print(
        f"{args.messages} x 1 KiB, {args.producers} producers x commit({args.batch}), 1 consumer "
        f"(page 500 + remove); sync always; history={'on' if args.history else 'off'}"
    )
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    cols = (
        "msg/s",
        "rows/msg",
        "journal fsyncs/msg",
        "pg wal syncs/msg",
        "elided %",
        "checkpoints",
    )
    print(f"{'case':<28}" + "".join(f"{c:>20}" for c in cols))
    for slow in (False, True):
        for journaled in (False, True):
            row = run(args.dsn, journaled, args, slow)
            label = (
                f"{'journaled' if journaled else 'postgres'}, {'slow' if slow else 'concurrent'}"
            )
            print(f"{label:<28}" + "".join(f"{row[c]:>20.3f}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
