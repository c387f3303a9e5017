"""A journaled-store writer for crash tests: prints every acknowledged operation, flushed.

Usage: ``python -m tests.crash.writer DSN JOURNAL_DIR ROUND [--ops N] [--exit]``

Lines: ``READY`` after start, ``ADD <id> <seq>``, ``TRY <id>`` (a removal about to be sent),
``REM <id>`` and ``ACK <id>`` once acknowledged. Adds go to
``queue://crash`` (producer ``ID:crash-<round>``), removes take the oldest known messages,
topic messages on ``topic://crash`` are acknowledged by one durable subscription. With
``--exit`` the process ends with ``os._exit`` after ``--ops`` operations (no stop, no final
checkpoint); otherwise it runs until killed. ``run_logged`` is the same writer for a process
forked from one that has imported it already: it writes its lines to a file.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from typing import TextIO

from journal.store import JournaledStore
from mqstore.db import create_engine
from mqstore.store import Ack, Batch, NewMessage, PostgresStore, Removal, SubscriptionKey

QUEUE = "queue://crash"
TOPIC = "topic://crash"
SUB = SubscriptionKey(TOPIC, "crash-client", "crash-sub")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("journal")
    parser.add_argument("round", type=int)
    parser.add_argument("--ops", type=int, default=10**9)
    parser.add_argument("--exit", action="store_true")
    parser.add_argument("--interval-ms", type=float, default=30)
    args = parser.parse_args()
    run(args.dsn, args.journal, args.round, sys.stdout, args.ops, args.exit, args.interval_ms)


def run_logged(dsn: str, journal: str, round_no: int, log: str) -> None:
    """Run until killed, writing the lines to the file ``log`` (for forked writers)."""
    with open(log, "w", encoding="ascii") as out:
        run(dsn, journal, round_no, out)


def run(
    dsn: str,
    journal: str,
    round_no: int,
    out: TextIO,
    ops: int = 10**9,
    exit_after: bool = False,
    interval_ms: float = 30,
) -> None:
    """Write ``ops`` random operations, printing each once the store acknowledged it."""
    engine = create_engine(dsn)
    store = JournaledStore(
        PostgresStore(engine, cleanup_interval_s=0),
        journal,
        checkpoint_interval_ms=interval_ms,
        segment_size=64 * 1024,
        shared_lock=False,
    )
    store.start()
    store.add_subscription(SUB)
    rng = random.Random(round_no)
    known = [m.id for m in store.page(QUEUE, None, 100_000)]
    out.write("READY\n")
    out.flush()
    seq = 0
    for _ in range(ops):
        roll = rng.random()
        if roll < 0.45 or not known:
            batch = [
                NewMessage(QUEUE, f"ID:crash-{round_no}", seq + i, os.urandom(rng.randrange(200)))
                for i in range(rng.randrange(1, 6))
            ]
            seq += len(batch)
            ids = store.add(batch)
            known += ids
            out.write("".join(f"ADD {i} {m.msgid_seq}\n" for i, m in zip(ids, batch, strict=True)))
        elif roll < 0.8:
            take = known[: rng.randrange(1, 4)]
            known = [i for i in known if i not in take]
            out.write("".join(f"TRY {i}\n" for i in take))  # in flight: may or may not land
            out.flush()
            if rng.random() < 0.5:
                store.remove(QUEUE, take)
            else:
                store.commit(Batch(removes=[Removal(QUEUE, i) for i in take]))
            out.write("".join(f"REM {i}\n" for i in take))
        else:
            [tid] = store.add([NewMessage(TOPIC, f"ID:crash-t{round_no}", seq, b"t")])
            seq += 1
            store.acknowledge([Ack(SUB, tid)])
            out.write(f"ACK {tid}\n")
        out.flush()
    if exit_after:
        out.flush()
        os._exit(0)
    store.stop()


if __name__ == "__main__":
    main()
