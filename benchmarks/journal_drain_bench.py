"""Removing messages that are already rows in the database: journaled store vs plain store.

Workload: ``--messages`` (20 000) messages of 1 KiB are stored in one queue (for the journaled
store, then checkpointed: every one is a row of ACTIVEMQ_MSGS), then removed by a drain:

* ``remove xN``: one thread reads the queue in pages of 500 (``page`` with a keyset cursor,
  as the broker reads it) and removes what it read with ``commit(Batch(removes=...))``, N
  messages a call; only the removal calls are timed;
* ``broker writer``: the queue is read first (not timed), then the broker's group-commit
  writer (``mqstore.broker.writer.StoreWriter``, as ``mqstore serve`` runs it) is handed one
  removal per message, as an auto-acknowledging consumer settles them, at most
  ``--outstanding`` waiting at a time.

Prints removals/s ("removed/s"), the same until the journaled store's checkpoint applied them
all to the database too ("applied/s"), the removal calls (writer: its batches), and the
statements per call run through SQLAlchemy apart from reads and checkpoints ("stmts/call";
the plain store runs its commit statement on the driver's connection, uncounted: one per
call). Journal sync policy ``always``; history on. Creates and drops a scratch database per
case. Run from the repository root::

    .venv/bin/python benchmarks/journal_drain_bench.py [--dsn postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import sql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journal.store import JournaledStore
from mqstore import migrate
from mqstore.broker.writer import Op, StoreWriter
from mqstore.db import create_engine, libpq_dsn
from mqstore.store import Batch, NewMessage, PostgresStore, Store
from mqstore.store.model import Cursor, Removal

Q = "queue://drain"
BODY = os.urandom(1024)


class Statements:
    """Counts statements run on an engine while ``on``, by threads other than ``ignored``."""

    def __init__(self, engine: sa.Engine) -> None:
        self.count = 0
        self.on = False
        self.ignored: set[int] = set()
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        if self.on and threading.get_ident() not in self.ignored:
            self.count += 1


@contextmanager
def scratch(dsn: str) -> Iterator[sa.Engine]:
    admin = libpq_dsn(dsn)
    name = f"mqs_drain_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = sa.make_url(dsn).set(drivername="postgresql+psycopg", database=name)
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        migrate.upgrade(engine)
        yield engine
    finally:
        engine.dispose()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def fill(store: Store, n: int) -> list[int]:
    ids: list[int] = []
    for start in range(0, n, 1000):
        seqs = range(start, min(n, start + 1000))
        adds = [NewMessage(Q, "ID:drain-bench", s, BODY) for s in seqs]
        ids += store.commit(Batch(adds=adds))
    if isinstance(store, JournaledStore):
        store.checkpoint()  # every message is a database row now
    return ids


def pages(store: Store) -> Iterator[list[int]]:
    """The queue read in pages of 500 in delivery order, as the broker reads it."""
    cursor: Cursor | None = None
    while rows := store.page(Q, cursor, 500):
        cursor = Cursor(rows[-1].priority, rows[-1].id)
        yield [m.id for m in rows]


def drain_calls(store: Store, per_call: int, counted: Statements) -> tuple[int, int, float]:
    """Messages removed, calls made and seconds spent in them (reads not counted)."""
    removed = calls = 0
    spent = 0.0
    for ids in pages(store):
        for start in range(0, len(ids), per_call):
            removes = [Removal(Q, i) for i in ids[start : start + per_call]]
            counted.on = True
            began = time.perf_counter()
            store.commit(Batch(removes=removes))
            spent += time.perf_counter() - began
            counted.on = False
            removed += len(removes)
            calls += 1
    return removed, calls, spent


def drain_writer(store: Store, outstanding: int, counted: Statements) -> tuple[int, int, float]:
    """One removal op per message read, through the broker's writer: messages removed, the
    writer's batches and seconds until the last removal was durable (reads not counted)."""
    read = [i for ids in pages(store) for i in ids]

    async def run() -> tuple[int, int]:
        writer = StoreWriter(store)
        writer.start()
        room = asyncio.Semaphore(outstanding)
        futures = []
        for i in read:
            await room.acquire()
            fut = writer.submit(Op(removes=[Removal(Q, i)]))
            fut.add_done_callback(lambda _f: room.release())
            futures.append(fut)
        await asyncio.gather(*futures)
        await writer.close()
        return len(futures), writer.batches + writer.inline_batches

    counted.on = True
    began = time.perf_counter()
    removed, batches = asyncio.run(run())
    seconds = time.perf_counter() - began
    counted.on = False
    return removed, batches, seconds


def run(dsn: str, journaled: bool, mode: str, args: argparse.Namespace) -> dict[str, float]:
    with scratch(dsn) as engine, tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        pg = PostgresStore(engine, cleanup_interval_s=0)
        store: Store = JournaledStore(pg, tmp, shared_lock=False) if journaled else pg
        store.start()
        try:
            ids = fill(store, args.messages)
            statements = Statements(engine)
            if isinstance(store, JournaledStore):
                thread = store._thread  # the checkpoint thread: its statements are not counted
                if thread is not None and thread.ident is not None:
                    statements.ignored.add(thread.ident)
            began = time.perf_counter()
            if mode == "writer":
                drained, calls, seconds = drain_writer(store, args.outstanding, statements)
            else:
                drained, calls, seconds = drain_calls(store, int(mode), statements)
            own = statements.count
            if isinstance(store, JournaledStore):
                store.checkpoint()
            applied = time.perf_counter() - began
            left = int(store.count(Q))
        finally:
            store.stop()
        if left or drained != len(ids):
            raise SystemExit(f"{drained} of {len(ids)} removed, {left} left after the drain")
        return {
            "removed/s": drained / seconds,
            "applied/s": drained / applied,
            "calls": float(calls),
            "stmts/call": own / calls,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--per-call", default="1,10,100,1000", help="removals per commit")
    parser.add_argument("--outstanding", type=int, default=200)
    parser.add_argument("--dir", default=None, help="journal parent directory (target disk)")
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn or set MQSTORE_TEST_DSN")
    logging.basicConfig(level=logging.WARNING)
    print(
        f"drain of {args.messages} x 1 KiB checkpointed messages, one queue; "
        f"sync always; history on"
    )
    print(
        f"machine: {platform.node()} {platform.machine()} {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    cols = ("removed/s", "applied/s", "calls", "stmts/call")
    print(f"{'case':<34}" + "".join(f"{c:>14}" for c in cols))
    modes = [m.strip() for m in args.per_call.split(",") if m.strip()] + ["writer"]
    for mode in modes:
        for journaled in (False, True):
            row = run(args.dsn, journaled, mode, args)
            how = "broker writer" if mode == "writer" else f"remove x{mode}"
            label = f"{'journaled' if journaled else 'plain'}, {how}"
            print(f"{label:<34}" + "".join(f"{row[c]:>14.1f}" for c in cols), flush=True)


if __name__ == "__main__":
    main()
