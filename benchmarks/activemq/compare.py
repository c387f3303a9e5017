"""Head-to-head: the same STOMP workloads against ActiveMQ 5.17 (JDBC on PostgreSQL, and
KahaDB) and ``mqstore serve`` (plain and journaled), on one PostgreSQL, in one run.

Prints msg/s (median of ``--repeat``), rows inserted into ACTIVEMQ_MSGS per message, the
mqstore/ActiveMQ ratios (and, for the relay of ``benchmarks/stomp_relay.py``, the best ratios
any broker could reach with the same clients on the same machine), and kill -9 failover
times of a master/standby pair of each kind with the same lease settings. Needs Debian's
``activemq`` package and its missing jars (see tests/interop/activemq_broker.py).

    python benchmarks/activemq/compare.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import stomp_relay  # noqa: E402
from stomp_bench import (  # noqa: E402
    WORKLOADS,
    ScratchDatabase,
    Server,
    bench_mode,
    workload_letters,
)

from tests.interop.activemq_broker import ActiveMQBroker, ActiveMQConfig  # noqa: E402

TARGETS = {
    "amq-jdbc": "ActiveMQ 5.17, JDBC on PostgreSQL",
    "amq-kahadb": "ActiveMQ 5.17, KahaDB",
    "mqs-plain": "mqstore serve --no-journal",
    "mqs-journal": "mqstore serve (journaled)",
    "relay": "benchmarks/stomp_relay.py: no broker work, nothing stored (the clients' ceiling)",
    "relay-fsync": "the relay with one fdatasync per SEND (the ceiling of a durable broker)",
}
#: Targets that write nothing to ACTIVEMQ_MSGS, so rows per message says nothing about them.
NO_ROWS = ("amq-kahadb", "relay", "relay-fsync")


class Running(Protocol):
    """A broker under test."""

    def stop(self) -> None: ...


def start_target(name: str, dsn: str, tmp: Path) -> tuple[int, Callable[[], None]]:
    """Start one broker; returns its STOMP port and how to stop it."""
    if name.startswith("relay"):
        return stomp_relay.spawn(tmp, name == "relay-fsync")
    if name.startswith("amq"):
        cfg = ActiveMQConfig(
            name="amq", dsn=dsn if name == "amq-jdbc" else None, create_tables=False
        )
        broker = ActiveMQBroker(cfg, tmp / name).start()
        return cfg.stomp_port, broker.stop
    (tmp / name).mkdir()
    server = Server(dsn, name == "mqs-journal", tmp / name)
    return server.port, server.stop


async def run_all(
    args: argparse.Namespace, target: str, port: int, rows: Callable[[], int]
) -> dict[str, tuple[float, float]]:
    """The workloads against one broker: {workload: (msg/s, rows per message)}."""
    results = await bench_mode(args, target, port, rows, settle=target == "mqs-journal")
    return {name: (rate, per) for name, rate, per, _ in results}


def failover(kind: str, dsn: str, tmp: Path, lease_ms: int, renew_ms: int) -> float:
    """Seconds from kill -9 of the master until the standby serves STOMP."""
    if kind == "amq":
        brokers = [
            ActiveMQBroker(
                ActiveMQConfig(
                    name=f"amq{i}",
                    dsn=dsn,
                    create_tables=False,
                    lease_ms=lease_ms,
                    renew_ms=renew_ms,
                ),
                tmp / f"fo-amq{i}",
            )
            for i in range(2)
        ]
        brokers[0].start()
        brokers[1].start(wait=False)
        master, standby = brokers
        kill, serving = master.kill, standby.serving
        stop: Callable[[], None] = standby.stop
    else:
        env = {"MQSTORE_LEASE_MS": str(lease_ms), "MQSTORE_RENEW_MS": str(renew_ms)}
        os.environ.update(env)
        servers = []
        for i in range(2):
            (tmp / f"fo-mqs{i}").mkdir()
            servers.append(
                Server(dsn, False, tmp / f"fo-mqs{i}", lock="lease", name=f"mqs{i}", wait=i == 0)
            )
        master_s, standby_s = servers
        kill, serving, stop = master_s.kill, standby_s.serving, standby_s.stop
    time.sleep(2)  # the standby is waiting
    assert not serving(), "the standby serves while the master lives"
    t0 = time.monotonic()
    kill()
    while not serving():
        if time.monotonic() - t0 > 4 * lease_ms / 1000 + 30:
            raise TimeoutError(f"{kind}: no takeover")
        time.sleep(0.05)
    took = time.monotonic() - t0
    stop()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("MQSTORE_TEST_DSN"))
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--workloads", type=workload_letters, default="abcde")
    parser.add_argument("--client", choices=["stomp.py", "asyncio"], default="stomp.py")
    parser.add_argument("--failovers", type=int, default=3, help="0 skips the failover part")
    parser.add_argument("--lease-ms", type=int, default=10_000)
    parser.add_argument("--renew-ms", type=int, default=5_000)
    args = parser.parse_args()
    if not args.dsn:
        parser.error("give --dsn (or set MQSTORE_TEST_DSN) of a TCP PostgreSQL")
    print(
        f"# compare: {args.messages} x 1 KiB persistent messages, median of {args.repeat}, "
        f"{args.client} clients; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}"
    )
    results: dict[str, dict[str, tuple[float, float]]] = {}
    for target in args.targets.split(","):
        db = ScratchDatabase(args.dsn, target.replace("-", "_"))
        with tempfile.TemporaryDirectory(prefix="mqs-cmp-") as tmp:
            port, stop = start_target(target, db.dsn, Path(tmp))
            try:
                results[target] = asyncio.run(run_all(args, target, port, db.rows_inserted))
            finally:
                stop()
                db.drop()
    print()
    targets = list(results)
    print(
        f"{'workload':<36}"
        + "".join(f" {t:>12}" for t in targets)
        + "   rows/msg "
        + " ".join(t for t in targets)
    )
    for w in args.workloads:
        line = f"{WORKLOADS[w]:<36}" + "".join(f" {results[t][w][0]:>12.0f}" for t in targets)
        line += "   " + " ".join(
            f"{results[t][w][1]:.3f}" if t not in NO_ROWS else "-" for t in targets
        )
        print(line)
    # mqstore against ActiveMQ; the relays against ActiveMQ are the best ratios any broker
    # could reach with these clients on this machine.
    pairs = [
        (s, b) for s in ("mqs-journal", "relay-fsync", "relay") for b in ("amq-jdbc", "amq-kahadb")
    ]
    pairs += [("mqs-journal", "relay-fsync")]
    print()
    for subject, base in pairs:
        if subject in results and base in results:
            ratios = "  ".join(
                f"{w}: {results[subject][w][0] / results[base][w][0]:.1f}x" for w in args.workloads
            )
            print(f"{subject} / {base}: {ratios}")
    if args.failovers:
        print()
        print(f"kill -9 failover, lease {args.lease_ms} ms, renew {args.renew_ms} ms:")
        for kind in ("amq", "mqs"):
            times = []
            for _ in range(args.failovers):
                db = ScratchDatabase(args.dsn, f"fo_{kind}")
                with tempfile.TemporaryDirectory(prefix="mqs-fo-") as tmp:
                    try:
                        times.append(
                            failover(kind, db.dsn, Path(tmp), args.lease_ms, args.renew_ms)
                        )
                    finally:
                        db.drop()
            label = "ActiveMQ 5.17 JDBC" if kind == "amq" else "mqstore serve"
            print(
                f"  {label:<20} median {statistics.median(times):5.1f} s  "
                f"(runs: {', '.join(f'{t:.1f}' for t in times)})"
            )


if __name__ == "__main__":
    main()
