"""Throughput of PostgresStore (NoLocker) beside raw psycopg ceilings on the same server.

    python benchmarks/store_bench.py [--dsn postgresql://...] [--messages 20000]

Creates a scratch database on the server of ``--dsn`` (default: env MQSTORE_TEST_DSN),
migrates it, and drops it at the end. Every figure is messages per second of 1 KiB bodies:

* add-only: ``store.add`` in batches; remove-only: ``store.remove`` of known IDs in batches;
* add+remove: a producer thread adding while a consumer thread pages and removes;
* raw ceilings: autocommit INSERT per row, and COPY 1000 rows + ``DELETE ... = ANY``;
* subscription pages: ``page_subscription`` of a durable subscription, pages of 200, read
  through ``--messages`` topic messages, by a plain store (ID order from the least
  LAST_ACKED_ID, one index scan per PRIORITY merged) and a prioritized one.

Batch size 1 runs ``--batch1-messages`` messages (default 2000): a round trip per message.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable

import psycopg
import sqlalchemy as sa
from psycopg import sql

from mqstore import migrate
from mqstore.db import create_engine, libpq_dsn, parse_dsn
from mqstore.store import NewMessage, PostgresStore, SubscriptionKey

QUEUE = "queue://bench"
BODY = os.urandom(1024)


def _messages(start: int, count: int) -> list[NewMessage]:
    return [NewMessage(QUEUE, "ID:bench-1:1:1", start + i, BODY) for i in range(count)]


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _reset(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE activemq_msgs, mqstore_history"))


def bench_store(engine: sa.Engine, total: int, batch: int) -> dict[str, float]:
    out: dict[str, float] = {}
    _reset(engine)
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    try:
        ids: list[int] = []

        def add_all() -> None:
            for first in range(0, total, batch):
                ids.extend(store.add(_messages(first, min(batch, total - first))))

        out["add"] = total / _timed(add_all)

        def remove_all() -> None:
            for first in range(0, total, batch):
                store.remove(QUEUE, ids[first : first + batch])

        out["remove"] = total / _timed(remove_all)
        assert store.count(QUEUE) == 0

        removed = 0
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for first in range(0, total, batch):
                    store.add(_messages(total + first, min(batch, total - first)))
            except BaseException as exc:
                errors.append(exc)

        def consumer() -> None:
            nonlocal removed
            try:
                while removed < total and not errors:
                    page = store.page(QUEUE, None, batch)
                    if not page:
                        time.sleep(0.0005)
                        continue
                    removed += store.remove(QUEUE, [m.id for m in page])
            except BaseException as exc:
                errors.append(exc)

        def both() -> None:
            threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

        out["add+remove"] = total / _timed(both)
        if errors:
            raise errors[0]
        assert removed == total, removed
    finally:
        store.stop()
    return out


TOPIC = "topic://bench"
PAGE = 200


def _read_subscription(store: PostgresStore, key: SubscriptionKey, total: int) -> None:
    cursor, seen = None, 0
    while rows := store.page_subscription(key, cursor, PAGE):
        seen += len(rows)
        cursor = rows[-1].cursor
    assert seen == total, seen


def bench_subscription_pages(engine: sa.Engine, total: int) -> dict[str, float]:
    """Messages per second a durable subscription's pages deliver, in each store mode."""
    _reset(engine)
    out: dict[str, float] = {}
    for prioritized in (False, True):
        with engine.begin() as conn:
            conn.execute(sa.text("TRUNCATE activemq_msgs, activemq_acks"))
        store = PostgresStore(engine, prioritized=prioritized, cleanup_interval_s=0)
        store.start()
        try:
            key = SubscriptionKey(TOPIC, "bench", "sub")
            store.add_subscription(key)
            for first in range(0, total, 1000):
                store.add(
                    [
                        NewMessage(TOPIC, "ID:bench-1:1:1", first + i, BODY)
                        for i in range(min(1000, total - first))
                    ]
                )

            out["prioritized" if prioritized else "plain"] = total / _timed(
                lambda s=store, k=key: _read_subscription(s, k, total)
            )
        finally:
            store.stop()
    return out


def bench_raw(dsn: str, total: int) -> dict[str, float]:
    """Ceilings with plain psycopg on the same table."""
    out: dict[str, float] = {}
    insert = (
        "INSERT INTO activemq_msgs (id, container, msgid_prod, msgid_seq, expiration, "
        "priority, msg) VALUES (%s, %s, %s, %s, 0, 0, %s)"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE activemq_msgs, mqstore_history")
        per_row = min(total, 5000)
        started = time.perf_counter()
        for i in range(per_row):
            conn.execute(insert, (i + 1, QUEUE, "ID:raw-1:1:1", i, BODY))
        out["insert-per-row"] = per_row / (time.perf_counter() - started)
        conn.execute("TRUNCATE activemq_msgs")

        columns = "(id, container, msgid_prod, msgid_seq, expiration, priority, msg)"
        started = time.perf_counter()
        for first in range(0, total, 1000):
            with conn.transaction(), conn.cursor() as cur:
                copy_sql = f"COPY activemq_msgs {columns} FROM STDIN (FORMAT BINARY)"
                with cur.copy(copy_sql) as copy:
                    copy.set_types(["int8", "text", "text", "int8", "int8", "int8", "bytea"])
                    for i in range(first, min(first + 1000, total)):
                        copy.write_row((i + 1, QUEUE, "ID:raw-1:1:1", i, 0, 0, BODY))
        out["copy-1000"] = total / (time.perf_counter() - started)

        started = time.perf_counter()
        for first in range(0, total, 1000):
            ids = list(range(first + 1, min(first + 1000, total) + 1))
            conn.execute("DELETE FROM activemq_msgs WHERE id = ANY(%s)", (ids,))
        out["delete-any-1000"] = total / (time.perf_counter() - started)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch1-messages", type=int, default=2_000)
    parser.add_argument("--batches", default="1,100,1000")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or set MQSTORE_TEST_DSN")

    admin = libpq_dsn(args.dsn)
    name = f"mqs_bench_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = parse_dsn(args.dsn).set(database=name)
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        migrate.upgrade(engine)
        print(f"{'batch':>6} {'messages':>9} {'add':>10} {'remove':>10} {'add+remove':>11}")
        for batch in [int(b) for b in args.batches.split(",")]:
            total = args.batch1_messages if batch == 1 else args.messages
            r = bench_store(engine, total, batch)
            print(
                f"{batch:>6} {total:>9} {r['add']:>10.0f} {r['remove']:>10.0f} "
                f"{r['add+remove']:>11.0f}",
                flush=True,
            )
        pages = bench_subscription_pages(engine, args.messages)
        print(f"durable subscription pages of {PAGE} (msg/s):")
        for key, value in pages.items():
            print(f"  {key:<16} {value:>10.0f}")
        raw = bench_raw(libpq_dsn(url), args.messages)
        print("raw psycopg ceilings (msg/s):")
        for key, value in raw.items():
            print(f"  {key:<16} {value:>10.0f}")
    finally:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
