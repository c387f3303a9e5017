"""The non-persistent messages of all queues together stay within the broker's
``memory_limit`` (ActiveMQ's memoryUsage), though each queue is far below its own
``queue_high_water``: once they reach it, producers of non-persistent messages are held back
(here refused at once, ``memory_block_timeout`` 0) at whichever queue, until consumers take
some; every message taken is delivered, in order."""

from __future__ import annotations

import dataclasses

from mqstore.broker.subscriptions import MESSAGE_OVERHEAD
from mqstore.store import Store
from tests.broker.conftest import FAST
from tests.broker.harness import BrokerThread, connect, wait_until

LIMIT = 1 << 20
SIZE = 64 * 1024
QUEUES = 8
PER_QUEUE = 8  # 512 KiB each: far below queue_high_water; 4 MiB in all


def _held(bt: BrokerThread) -> int:
    dests = bt.snapshot()["destinations"]
    return sum(st.get("non_persistent_bytes", 0) for st in dests.values())


def _fill(bt: BrokerThread, queue: int) -> tuple[list[str], list[str]]:
    """Non-persistent SENDs to one queue, one at a time, until one is refused: the bodies
    taken, and the refusals."""
    prod, col = connect(bt.port)
    taken: list[str] = []
    for i in range(PER_QUEUE):
        body = f"{queue}-{i}-" + "x" * SIZE
        prod.send(f"/queue/np{queue}", body, receipt=f"r{i}")
        assert col.wait(lambda n=i: f"r{n}" in col.receipts or bool(col.errors))
        if col.errors:
            break
        taken.append(body)
    refusals = [e.headers.get("message", "") + e.body for e in col.errors]
    if not refusals:
        prod.disconnect()
    return taken, refusals


def test_non_persistent_messages_of_many_queues_stop_at_the_memory_limit(
    pg_store: Store,
) -> None:
    cfg = dataclasses.replace(FAST, memory_limit=LIMIT, memory_block_timeout=0)
    bt = BrokerThread(pg_store, cfg).start()
    try:
        taken: dict[int, list[str]] = {}
        refused: list[str] = []
        for q in range(QUEUES):
            taken[q], refusals = _fill(bt, q)
            refused += refusals
        # Each queue may take the one message that finds it open past the limit.
        assert _held(bt) <= LIMIT + QUEUES * (SIZE + 100 + MESSAGE_OVERHEAD)
        assert refused and all("memory_limit" in r for r in refused), refused
        assert sum(map(len, taken.values())) < QUEUES * PER_QUEUE

        # Consumers make room: a queue refused before takes messages again.
        cons, col = connect(bt.port)
        cons.subscribe("/queue/np0", id="s0", ack="auto")
        col.wait_messages(len(taken[0]))
        assert col.bodies() == taken[0]
        assert wait_until(lambda: _held(bt) < LIMIT)
        last = QUEUES - 1
        more, _ = _fill(bt, last)
        assert more
        taken[last] += more
        for q in range(1, QUEUES):
            cons.subscribe(f"/queue/np{q}", id=f"s{q}", ack="auto")
        col.wait_messages(sum(map(len, taken.values())))
        for q in range(QUEUES):
            got = [b for b in col.bodies() if b.startswith(f"{q}-")]
            assert got == taken[q]
        assert wait_until(lambda: _held(bt) == 0)
        cons.disconnect()
    finally:
        bt.close()
