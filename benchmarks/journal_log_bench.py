"""Journal log layer throughput: 1 KiB AddMessage records from 1, 4 and 16 threads.

Workload: each thread appends one-op records (an AddMessage with a 1 KiB body) in a loop
for a fixed time, under each sync policy. Prints records/s and fsyncs per record (group
commit shows as fewer than one fsync per record under ``always``). Run from the repository
root::

    .venv/bin/python benchmarks/journal_log_bench.py [--dir /path/on/target/disk] [--seconds 2]
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from journal import AddMessage, Journal

POLICIES = ("always", "batch:5ms", "never")
THREADS = (1, 4, 16)
BODY = bytes(1024)


def run(directory: Path, policy: str, threads: int, seconds: float) -> tuple[float, float]:
    """Return (records per second, fsyncs per record) for one cell."""
    journal = Journal.open(directory, sync_policy=policy)
    stop = threading.Event()
    counts = [0] * threads
    start = threading.Barrier(threads + 1)

    def work(t: int) -> None:
        start.wait()
        i = 0
        while not stop.is_set():
            journal.append([AddMessage(t << 40 | i, "queue://bench", "ID:p", i, 0, 4, BODY)])
            i += 1
        counts[t] = i

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - began
    fsyncs = journal.stats().fsyncs
    journal.close()
    records = sum(counts)
    return records / elapsed, fsyncs / max(records, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="parent directory for the journal")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each cell")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the 'never' policy warns loudly at each open
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}")
    print(f"python {platform.python_version()}; workload: 1-op records, AddMessage 1 KiB body")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="journal-bench-") as tmp:
        print(f"journal directory: {tmp}")
        print(f"{'policy':<10} {'threads':>7} {'records/s':>11} {'fsyncs/record':>14}")
        for policy in POLICIES:
            for threads in THREADS:
                directory = Path(tmp) / f"{policy.replace(':', '_')}-{threads}"
                rate, per_record = run(directory, policy, threads, args.seconds)
                print(f"{policy:<10} {threads:>7} {rate:>11,.0f} {per_record:>14.3f}")


if __name__ == "__main__":
    main()
