"""Fixtures: a broker on a thread over the in-memory store, PostgresStore and the journaled store.

``broker`` and ``any_store`` are parametrized over the three stores (the journaled one is
what ``mqstore serve`` runs by default, committing on the event loop when it can); the
database variants use the ``engine`` fixture of tests/conftest.py (a fresh migrated
database per test).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from mqstore.broker import BrokerConfig, RedeliveryPolicy
from mqstore.broker.memory_store import MemoryStore
from mqstore.store.port import Store
from mqstore.store.postgres import PostgresStore
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


@pytest.fixture(params=["memory", "postgres", "journaled"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The in-memory store, a PostgresStore and a journaled store on a fresh database."""
    if request.param == "memory":
        store: Store = MemoryStore()
    else:
        from mqstore.store.postgres import PostgresStore

        store = PostgresStore(request.getfixturevalue("engine"), cleanup_interval_s=0)
        if request.param == "journaled":
            from journal.store import JournaledStore

            store = JournaledStore(store, tmp_path / "journal", shared_lock=False)
    store.start()
    yield store
    store.stop()


@pytest.fixture(params=["memory", "postgres"])
def prioritized_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """Stores in ActiveMQ's prioritizedMessages mode."""
    if request.param == "memory":
        store: Store = MemoryStore(prioritized=True)
    else:
        from mqstore.store.postgres import PostgresStore

        store = PostgresStore(
            request.getfixturevalue("engine"), cleanup_interval_s=0, prioritized=True
        )
    store.start()
    yield store
    store.stop()


@pytest.fixture
def prio_broker(prioritized_store: Store) -> Iterator[BrokerThread]:
    bt = BrokerThread(prioritized_store, FAST).start()
    yield bt
    bt.close()


@pytest.fixture
def broker(any_store: Store) -> Iterator[BrokerThread]:
    bt = BrokerThread(any_store, FAST).start()
    yield bt
    bt.close()


@pytest.fixture
def mem_broker(memory_store: MemoryStore) -> Iterator[BrokerThread]:
    bt = BrokerThread(memory_store, FAST).start()
    yield bt
    bt.close()


@pytest.fixture
def pg_store(engine: Engine) -> Iterator[PostgresStore]:
    """A started PostgreSQL store on a fresh database, its cleanup left to the test."""
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    yield store
    store.stop()


@pytest.fixture
def pg_broker(pg_store: PostgresStore) -> Iterator[BrokerThread]:
    """A broker with the :data:`FAST` settings on :func:`pg_store`."""
    bt = BrokerThread(pg_store, FAST).start()
    yield bt
    bt.close()


@pytest.fixture
def pg_broker_one_redelivery(pg_store: PostgresStore) -> Iterator[BrokerThread]:
    """A broker on :func:`pg_store` that dead-letters a message past one redelivery."""
    policy = dataclasses.replace(FAST.redelivery, maximum_redeliveries=1)
    broker = BrokerThread(pg_store, dataclasses.replace(FAST, redelivery=policy)).start()
    yield broker
    broker.close()
