"""The database store's periodic maintenance (topic cleanup, history trim) under a journal."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.store import Ack, SubscriptionKey
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

T = "topic://prices"
T2 = "topic://news"
Q = "queue://orders"


def test_the_periodic_cleanup_keeps_what_a_journaled_retroactive_subscription_needs(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    """A retroactive subscription still only in the journal gets the acknowledged topic
    messages stored before it, as on the plain store: the periodic cleanup checkpoints it
    before deleting rows the other subscriptions acknowledged."""
    directory = tmp_path / "journal"
    first = make_journaled(directory)
    a, b, r = (
        SubscriptionKey(T, "c", "a"),
        SubscriptionKey(T2, "c", "b"),
        SubscriptionKey(T, "c", "r"),
    )
    first.add_subscription(a)
    first.add_subscription(b)
    ids = first.add([msg(T, i) for i in range(3)])
    other = first.add([msg(T2, 9)])
    first.checkpoint()
    first.acknowledge([Ack(a, ids[-1]), Ack(b, other[0])])
    first.checkpoint()
    first.add_subscription(r, retroactive=True)
    first.stop(checkpoint=False)  # the subscription is left in the journal, to replay
    store = make_journaled(directory, cleanup_interval_s=0.01)
    deadline = time.monotonic() + 30
    while store.count(T2):  # the cleanup ran once this acknowledged message is gone
        assert time.monotonic() < deadline, "no periodic cleanup removed the acknowledged message"
        time.sleep(0.01)
    assert [m.msgid_seq for m in store.page_subscription(r, None, 10)] == [0, 1, 2]
    assert store.pending_count(r) == 3


def test_the_cleanup_holds_back_no_writer_while_the_database_deletes(
    make_journaled: JournaledFactory, engine: Engine
) -> None:
    """A cleanup stuck in the database (here on a row another session locked) lets
    producers and consumers go on; it finishes once the row is free, counting every
    acknowledged topic message."""
    store = make_journaled()
    a = SubscriptionKey(T, "c", "a")
    store.add_subscription(a)
    ids = store.add([msg(T, i) for i in range(3)])
    store.checkpoint()
    store.acknowledge([Ack(a, ids[-1])])
    cleaned: list[int] = []
    with engine.connect() as blocker:
        blocker.execute(
            sa.text("SELECT 1 FROM activemq_msgs WHERE id = :i FOR UPDATE"), {"i": ids[0]}
        )
        cleaner = threading.Thread(target=lambda: cleaned.append(store.cleanup()))
        cleaner.start()
        waiting = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%DELETE FROM activemq_msgs%'"
        )
        deadline = time.monotonic() + 30
        with engine.connect() as probe:
            while not probe.execute(waiting).scalar_one():
                probe.rollback()  # a transaction sees one snapshot of pg_stat_activity
                assert time.monotonic() < deadline, "the cleanup never reached the locked row"
                time.sleep(0.02)
        added: list[int] = []
        producer = threading.Thread(target=lambda: added.extend(store.add([msg(Q, 1)])))
        producer.start()
        producer.join(timeout=30)
        went_on = bool(added) and cleaner.is_alive()
        blocker.rollback()
    producer.join(timeout=30)
    cleaner.join(timeout=30)
    assert went_on, "a producer waited for the cleanup's database work"
    assert cleaned == [3]
    assert store.count(Q) == 1
    assert store.count(T) == 0
