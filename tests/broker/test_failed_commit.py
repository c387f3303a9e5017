"""A COMMIT whose store write fails rolls the whole transaction back: nothing is stranded."""

from __future__ import annotations

from typing import Any

import pytest

from mqstore.broker.memory_store import MemoryStore
from mqstore.errors import DatabaseUnavailableError
from mqstore.store import Batch
from tests.broker.harness import BrokerThread, connect


def _fail_next_removal(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next store commit that consumes a message fails as if the database were away."""
    real = store.commit
    armed = [True]

    def commit(batch: Batch) -> list[int]:
        if armed[0] and batch.removes:
            armed[0] = False
            raise DatabaseUnavailableError("the database went away")
        return list(real(batch))

    monkeypatch.setattr(store, "commit", commit)


def test_messages_acked_and_nacked_in_a_commit_that_failed_are_delivered_again(
    mem_broker: BrokerThread, memory_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    prod, _ = connect(mem_broker.port)
    for body in ("acked", "nacked"):
        prod.send("/queue/work", body, headers={"persistent": "true"}, receipt=body)
    cons, col = connect(mem_broker.port)
    cons.subscribe("/queue/work", id="1", ack="client-individual")
    acked, nacked = col.wait_messages(2)
    cons.begin("t")
    cons.ack(acked.headers["ack"], transaction="t")
    cons.nack(nacked.headers["ack"], transaction="t")
    _fail_next_removal(memory_store, monkeypatch)
    cons.commit("t", headers={"receipt": "c"})
    assert col.wait(lambda: bool(col.errors)), "the failed COMMIT was receipted"
    assert "store is unavailable" in col.errors[0].headers["message"]

    again, col2 = connect(mem_broker.port)
    again.subscribe("/queue/work", id="2", ack="auto")
    got: list[Any] = col2.wait_messages(2)
    assert sorted(m.body for m in got) == ["acked", "nacked"]
    again.disconnect(receipt="bye")
    assert memory_store.count("queue://ActiveMQ.DLQ") == 0
