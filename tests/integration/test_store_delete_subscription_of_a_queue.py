"""Deleting a "durable subscription" of a queue must not empty the queue.

``delete_subscription`` took any container. With a queue's it deleted the ACKS rows of that
key (a virtual-topic marker row, CLIENT_ID = SUB_NAME = the queue, if it named one), found
no subscription left on the container, and so removed every message of the queue as a
topic's messages nobody needs (recorded as acknowledged). ``add_subscription`` refuses a
container that is not a topic; deleting is refused the same way, before anything is written.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import InvalidMessageError
from mqstore.store import PostgresStore, SubscriptionKey
from tests.integration.conftest import msg

Q = "queue://VirtualTopicConsumers.app.orders"
T = "topic://orders"


def _marker_rows(engine: Engine) -> int:
    """ActiveMQ's virtual-topic queue marker rows (PRIORITY 11) for Q."""
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT count(*) FROM activemq_acks WHERE container = :q AND priority = 11"
                ),
                {"q": Q},
            ).scalar_one()
        )


def test_deleting_a_subscription_of_a_queue_is_refused_and_keeps_its_messages(
    store: PostgresStore,
) -> None:
    store.add([msg(Q, i) for i in range(3)])
    with pytest.raises(InvalidMessageError, match="need a topic"):
        store.delete_subscription(SubscriptionKey(Q, "client-1", "sub-a"))
    assert store.count(Q) == 3


def test_deleting_a_virtual_topic_queues_marker_row_is_refused(
    store: PostgresStore, engine: Engine
) -> None:
    with engine.begin() as conn:  # as ActiveMQ's doRecordDestination writes it
        conn.execute(
            sa.text(
                "INSERT INTO activemq_acks (container, sub_dest, client_id, sub_name, selector, "
                "last_acked_id, priority) VALUES (:q, :q, :q, :q, NULL, 0, 11)"
            ),
            {"q": Q},
        )
    store.add([msg(Q, i) for i in range(3)])
    with pytest.raises(InvalidMessageError, match="need a topic"):
        store.delete_subscription(SubscriptionKey(Q, Q, Q))
    assert store.count(Q) == 3
    assert _marker_rows(engine) == 1


def test_deleting_a_subscription_of_a_temporary_topic_is_refused(store: PostgresStore) -> None:
    temp = "temp-topic://ID:host-1:1:1"
    store.add([msg(temp, 1)])
    with pytest.raises(InvalidMessageError, match="need a topic"):
        store.delete_subscription(SubscriptionKey(temp, "client-1", "sub-a"))
    assert store.count(temp) == 1


def test_deleting_a_topics_last_subscription_still_removes_its_messages(
    store: PostgresStore,
) -> None:
    key = SubscriptionKey(T, "client-1", "sub-a")
    store.add_subscription(key)
    store.add([msg(T, 1), msg(Q, 1)])
    store.delete_subscription(key)
    assert store.count(T) == 0
    assert store.count(Q) == 1
