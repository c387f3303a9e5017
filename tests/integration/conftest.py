"""Stores on a fresh migrated database per test."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy.engine import Engine

from mqstore.lock import LeaseLocker, RowLocker
from mqstore.schema import build_schema
from mqstore.store import NewMessage, PostgresStore

StoreFactory = Callable[..., PostgresStore]


@pytest.fixture
def make_store(engine: Engine) -> Iterator[StoreFactory]:
    stores: list[PostgresStore] = []

    def make(**kwargs: object) -> PostgresStore:
        kwargs.setdefault("cleanup_interval_s", 0)
        store = PostgresStore(engine, **kwargs)  # type: ignore[arg-type]
        store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.stop()


@pytest.fixture
def store(make_store: StoreFactory) -> PostgresStore:
    return make_store()


def msg(
    container: str,
    seq: int,
    *,
    priority: int = 4,
    expiration: int = 0,
    body: bytes | None = None,
    producer: str = "ID:test-1:1:1",
) -> NewMessage:
    """A new message with an opaque body naming its sequence."""
    return NewMessage(
        container=container,
        msgid_prod=producer,
        msgid_seq=seq,
        msg=body if body is not None else f"body-{seq}".encode(),
        priority=priority,
        expiration=expiration,
    )


@contextlib.contextmanager
def lease_held(engine: Engine, holder: str) -> Iterator[LeaseLocker]:
    """Broker ``holder`` holds the lease (long enough to outlast a test), then releases it."""
    lease = LeaseLocker(engine, build_schema(""), holder, lease_ms=120_000, renew_ms=1000)
    assert lease.try_acquire()
    try:
        yield lease
    finally:
        lease.release()


@contextlib.contextmanager
def row_lock_held(engine: Engine, holder: str) -> Iterator[RowLocker]:
    """A row-lock master ``holder`` holds the lock row in its open transaction."""
    row = RowLocker(engine, build_schema(""), holder)
    assert row.acquire(threading.Event())
    try:
        yield row
    finally:
        row.release()
