"""The database store's periodic maintenance (topic cleanup, history trim) under a journal."""

from __future__ import annotations

import time
from pathlib import Path

from mqstore.store import Ack, SubscriptionKey
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

T = "topic://prices"
T2 = "topic://news"


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
