"""Messages of a durable subscription whose acks failed to reach the store (the database
away) come back to the live subscriber in the order they were first delivered, whatever the
order their failed store writes come back in."""

from __future__ import annotations

import threading

import pytest

from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import DatabaseUnavailableError
from mqstore.store import Batch
from tests.broker.harness import BrokerThread, connect, wait_until

P = {"persistent": "true"}


def test_acks_failed_in_one_write_redeliver_in_delivery_order(
    mem_broker: BrokerThread, memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    cons, col = connect(mem_broker.port, client_id="c1")
    cons.subscribe(
        "/topic/t", id="1", ack="client-individual",
        headers={"activemq.subscriptionName": "s"}, receipt="sub",
    )  # fmt: skip
    assert col.wait(lambda: "sub" in col.receipts)
    prod, _ = connect(mem_broker.port)
    for i in range(3):
        prod.send("/topic/t", f"m{i}", headers=P, receipt=f"s{i}")
    first = col.wait_messages(3)
    assert [m.body for m in first] == ["m0", "m1", "m2"]

    # The write of m0's ack is held until the acks of m1 and m2 wait behind it; the store
    # writes of those fail (the database went away), and come back together.
    real = memory_store.commit
    release = threading.Event()
    writes: list[Batch] = []

    def commit(batch: Batch) -> list[int]:
        if batch.acks:
            writes.append(batch)
            if len(writes) == 1:
                assert release.wait(10)
            else:
                raise DatabaseUnavailableError("the database went away")
        return list(real(batch))

    monkeypatch.setattr(memory_store, "commit", commit)
    cons.ack(first[0].headers["ack"])
    assert wait_until(lambda: len(writes) == 1)
    cons.ack(first[1].headers["ack"])
    cons.ack(first[2].headers["ack"])
    cons.begin("mark", headers={"receipt": "acks-read"})  # the acks before it are handled
    assert col.wait(lambda: "acks-read" in col.receipts)
    release.set()

    again = col.wait_messages(5)[3:]
    assert [m.body for m in again] == ["m1", "m2"]
    assert not col.errors
    cons.disconnect()
    prod.disconnect()
