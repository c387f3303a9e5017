"""A store whose engine has no connection free: a store error that says what to do."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from mqstore.db import create_engine
from mqstore.errors import DatabaseUnavailableError
from mqstore.store import PostgresStore, SubscriptionKey, Xid
from tests.integration.conftest import msg

Q = "queue://busy"


@pytest.fixture
def busy(dsn: str) -> Iterator[PostgresStore]:
    """A started store whose engine's two connections are then all held by others."""
    engine = create_engine(dsn, pool_size=1, pool_timeout=0.2)  # and one overflow
    store = PostgresStore(engine, cleanup_interval_s=0)
    store.start()
    with contextlib.ExitStack() as held:
        for _ in range(2):
            held.enter_context(engine.connect())
        yield store
    store.stop()
    engine.dispose()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.add([msg(Q, 1)]),
        lambda s: s.count(Q),
        lambda s: s.page(Q, None, 10),
        lambda s: s.add_subscription(SubscriptionKey("topic://busy", "c", "s")),
        lambda s: s.xa_recover(),
        lambda s: s.xa_commit(Xid(1, b"g", b"")),
    ],
    ids=["add", "count", "page", "add_subscription", "xa_recover", "xa_commit"],
)
def test_a_call_finding_every_pooled_connection_busy_says_to_size_the_pool(
    busy: PostgresStore, call: object
) -> None:
    with pytest.raises(DatabaseUnavailableError, match="size the pool"):
        call(busy)  # type: ignore[operator]
