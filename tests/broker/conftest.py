"""Fixtures: a broker on a thread, over the in-memory store (and PostgreSQL when available)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqstore.broker import BrokerConfig, RedeliveryPolicy
from mqstore.broker.memory_store import MemoryStore
from tests.broker.harness import BrokerThread

FAST = BrokerConfig(
    heartbeat_ms=(0, 0),
    redelivery=RedeliveryPolicy(initial_redelivery_delay=0, redelivery_delay=0),
    expiry_interval=0.2,
)


@pytest.fixture
def memory_store() -> Iterator[MemoryStore]:
    store = MemoryStore()
    store.start()
    yield store
    store.stop()


@pytest.fixture
def broker(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    bt = BrokerThread(memory_store, FAST).start()
    yield bt
    bt.close()
