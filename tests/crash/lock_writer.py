"""A broker stand-in for the failover tests: wait for the master lock, then write in a loop.

Run as ``python -m tests.crash.lock_writer DSN NAME {lease,row} [LEASE_MS RENEW_MS]``. Prints
one line per event, flushed at once so a SIGKILL loses nothing already printed:

* ``STARTING <epoch s>`` before it starts waiting for the lock;
* ``MASTER <epoch s>`` when the store started (the lock is held);
* ``WROTE <id> <t0>`` after each committed add, ``t0`` the epoch s taken before the add
  (also stored in the body as ``NAME:t0``);
* ``LOST <epoch s>`` when a write was refused with LockLostError, then it exits.
"""

from __future__ import annotations

import sys
import threading
import time

from mqstore.db import create_engine
from mqstore.errors import LockLostError
from mqstore.lock import LeaseLocker, Locker, RowLocker
from mqstore.statements import statements_for
from mqstore.store import NewMessage, PostgresStore

QUEUE = "queue://failover"


def main(argv: list[str]) -> int:
    dsn, name, kind = argv[0], argv[1], argv[2]
    lease_ms = int(argv[3]) if len(argv) > 3 else 1500
    renew_ms = int(argv[4]) if len(argv) > 4 else 500
    engine = create_engine(dsn, pool_size=2)
    schema = statements_for("").schema
    locker: Locker
    if kind == "lease":
        locker = LeaseLocker(engine, schema, name, lease_ms=lease_ms, renew_ms=renew_ms)
    else:
        locker = RowLocker(engine, schema, name, renew_ms=renew_ms, poll_ms=200)
    lost = threading.Event()
    store = PostgresStore(engine, locker=locker, cleanup_interval_s=0, on_lock_lost=lost.set)
    print(f"STARTING {time.time():.6f}", flush=True)
    store.start()
    print(f"MASTER {time.time():.6f}", flush=True)
    seq = 0
    while True:
        seq += 1
        t0 = time.time()
        try:
            [mid] = store.add(
                [NewMessage(QUEUE, f"ID:{name}:1:1", seq, f"{name}:{t0:.6f}".encode())]
            )
        except LockLostError:
            print(f"LOST {time.time():.6f}", flush=True)
            return 3
        print(f"WROTE {mid} {t0:.6f}", flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
