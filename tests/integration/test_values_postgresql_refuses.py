"""Values PostgreSQL cannot take (a NUL character, a lone surrogate, an integer past a Java
long) in calls the store does not validate value by value: a store error saying so, never
a driver's exception, and nothing written."""

from __future__ import annotations

import pytest

from mqstore.errors import InvalidMessageError
from mqstore.store import Ack, Batch, PostgresStore, Removal, SubscriptionKey
from tests.integration.conftest import msg

Q = "queue://values"
T = "topic://values"
NUL_KEY = SubscriptionKey(T, "client\x00", "sub")


def test_an_ack_naming_a_client_id_with_a_nul_is_refused_and_nothing_written(
    store: PostgresStore,
) -> None:
    key = SubscriptionKey(T, "client", "sub")
    store.add_subscription(key)
    [topic] = store.add([msg(T, 1)])
    with pytest.raises(InvalidMessageError, match="NUL"):
        store.commit(Batch(adds=[msg(Q, 1)], acks=[Ack(key, topic), Ack(NUL_KEY, topic)]))
    assert store.count(Q) == 0
    assert store.pending_count(key) == 1


def test_a_removal_of_an_id_past_a_java_long_is_refused(store: PostgresStore) -> None:
    [kept] = store.add([msg(Q, 1)])
    with pytest.raises(InvalidMessageError, match="out of range"):
        store.commit(Batch(removes=[Removal(Q, kept), Removal(Q, 2**63)]))
    assert store.count(Q) == 1


def test_a_destination_with_a_lone_surrogate_is_refused_and_the_store_goes_on(
    store: PostgresStore,
) -> None:
    with pytest.raises(InvalidMessageError, match="surrogate"):
        store.add([msg("queue://bad\udcff", 1)])
    assert store.add([msg(Q, 1)]) != []


@pytest.mark.parametrize(
    "read",
    [
        lambda s: s.count("queue://a\x00b"),
        lambda s: s.page("queue://a\x00b", None, 10),
        lambda s: s.get_subscription(NUL_KEY),
        lambda s: s.page_subscription(NUL_KEY, None, 10),
        lambda s: s.pending_count(NUL_KEY),
        lambda s: s.find("ID:\udcff", 1),
    ],
    ids=["count", "page", "get_subscription", "page_subscription", "pending_count", "find"],
)
def test_reads_of_values_postgresql_cannot_hold_are_refused_by_the_store(
    store: PostgresStore, read: object
) -> None:
    with pytest.raises(InvalidMessageError):
        read(store)  # type: ignore[operator]


def test_deleting_a_subscription_whose_name_holds_a_nul_is_refused(store: PostgresStore) -> None:
    with pytest.raises(InvalidMessageError, match="NUL"):
        store.delete_subscription(NUL_KEY)
