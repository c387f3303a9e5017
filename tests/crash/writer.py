"""A journaled-store writer for crash tests: prints every acknowledged operation, flushed.

Usage: ``python -m tests.crash.writer DSN JOURNAL_DIR ROUND [--ops N] [--exit]``

Lines: ``READY`` after start, ``ADD <id> <seq>``, ``TRY <id>`` (a removal about to be sent),
``REM <id>`` and ``ACK <id>`` once acknowledged. Adds go to
``queue://crash`` (producer ``ID:crash-<round>``), removes take the oldest known messages,
topic messages on ``topic://crash`` are acknowledged by one durable subscription. With
``--exit`` the process ends with ``os._exit`` after ``--ops`` operations (no stop, no final
checkpoint); otherwise it runs until killed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys

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
    out = sys.stdout
    engine = create_engine(args.dsn)
    store = JournaledStore(
        PostgresStore(engine, cleanup_interval_s=0),
        args.journal,
        checkpoint_interval_ms=args.interval_ms,
        segment_size=64 * 1024,
        shared_lock=False,
    )
    store.start()
    store.add_subscription(SUB)
    rng = random.Random(args.round)
    known = [m.id for m in store.page(QUEUE, None, 100_000)]
    out.write("READY\n")
    out.flush()
    seq = 0
    for _ in range(args.ops):
        roll = rng.random()
        if roll < 0.45 or not known:
            batch = [
                NewMessage(QUEUE, f"ID:crash-{args.round}", seq + i, os.urandom(rng.randrange(200)))
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
            [tid] = store.add([NewMessage(TOPIC, f"ID:crash-t{args.round}", seq, b"t")])
            seq += 1
            store.acknowledge([Ack(SUB, tid)])
            out.write(f"ACK {tid}\n")
        out.flush()
    if args.exit:
        out.flush()
        os._exit(0)
    store.stop()


if __name__ == "__main__":
    main()
