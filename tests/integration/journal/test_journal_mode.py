"""A journal holding records not yet applied to the database opens only in the mode (plain or
prioritized, MQSTORE_PRIORITIZED_MESSAGES) they were written in: replayed in the other one,
their store priorities and acknowledgements would mean something else and lose messages.
A journal with nothing to replay opens in either mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from journal.mode import MODE_FILE
from journal.store import JournaledStore, JournalModeMismatchError, JournalUnusableError
from mqstore.store import Ack, SubscriptionKey
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

T = "topic://prices"
Q = "queue://orders"
A = SubscriptionKey(T, "client-a", "sub-a")


def _pending(store: JournaledStore) -> list[int]:
    return [r.id for r in store.page_subscription(A, None, 100)]


def _queued(store: JournaledStore) -> list[int]:
    return [r.id for r in store.page(Q, None, 100)]


def _rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM activemq_msgs")).scalar_one())


def _crashed(
    make_journaled: JournaledFactory, directory: Path, *, prioritized: bool
) -> tuple[list[int], list[int]]:
    """A journal in ``directory`` written in the given mode: a subscription, topic and queue
    adds of several priorities, an ack and a removal, none of it checkpointed. Returns the
    subscription's pending IDs and the queue's IDs as that store read them."""
    store = make_journaled(directory, prioritized=prioritized)
    store.add_subscription(A)
    ids = [store.add([msg(T, i, priority=p)])[0] for i, p in enumerate([5, 4, 9, 4, 0])]
    store.acknowledge([Ack(A, ids[1], store.pg.column_priority(4))])
    queued = [store.add([msg(Q, 10 + i, priority=p)])[0] for i, p in enumerate([5, 1, 7])]
    store.remove(Q, [queued[0]])
    pending, queue = _pending(store), _queued(store)
    store.stop(checkpoint=False)  # what a crash leaves: everything still to replay
    return pending, queue


def _refused(
    make_journaled: JournaledFactory, directory: Path, *, prioritized: bool
) -> JournalModeMismatchError:
    with pytest.raises(JournalModeMismatchError) as refused:
        make_journaled(directory, prioritized=prioritized)
    return refused.value


def test_prioritized_journal_with_records_to_replay_is_refused_in_plain_mode_and_loses_nothing(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    pending, queued = _crashed(make_journaled, directory, prioritized=True)
    assert len(pending) == 4 and len(queued) == 2

    message = str(_refused(make_journaled, directory, prioritized=False))
    assert "prioritized mode" in message and "plain mode" in message
    assert "MQSTORE_PRIORITIZED_MESSAGES=true" in message
    assert "stop the broker cleanly" in message and "then switch to plain mode" in message
    assert _rows(engine) == 0  # nothing of it was applied on the way

    store = make_journaled(directory, prioritized=True)
    assert _pending(store) == pending
    assert _queued(store) == queued
    store.checkpoint()
    assert _rows(engine) == 6
    assert _pending(store) == pending
    assert _queued(store) == queued


def test_plain_journal_with_records_to_replay_is_refused_in_prioritized_mode_and_loses_nothing(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    pending, queued = _crashed(make_journaled, directory, prioritized=False)
    assert len(pending) == 3 and len(queued) == 2  # a plain ack passes every priority

    message = str(_refused(make_journaled, directory, prioritized=True))
    assert "plain mode" in message and "prioritized mode" in message
    assert "MQSTORE_PRIORITIZED_MESSAGES=false" in message
    assert "then switch to prioritized mode" in message
    assert _rows(engine) == 0

    store = make_journaled(directory, prioritized=False)
    assert _pending(store) == pending
    assert _queued(store) == queued
    store.checkpoint()
    assert _pending(store) == pending
    assert _queued(store) == queued


@pytest.mark.parametrize("written", [True, False], ids=["prioritized", "plain"])
def test_journal_stopped_cleanly_opens_in_the_other_mode_and_then_keeps_that_one(
    make_journaled: JournaledFactory, tmp_path: Path, written: bool
) -> None:
    directory = tmp_path / "journal"
    store = make_journaled(directory, prioritized=written)
    store.add([msg(Q, 1, priority=6)])
    store.stop()  # the final checkpoint applies the whole journal

    store = make_journaled(directory, prioritized=not written)
    assert store.prioritized is not written
    [first] = _queued(store)
    [second] = store.add([msg(Q, 2, priority=6)])
    store.stop(checkpoint=False)

    _refused(make_journaled, directory, prioritized=written)
    store = make_journaled(directory, prioritized=not written)
    assert sorted(_queued(store)) == [first, second]  # read by each one's store priority


def test_journal_without_a_recorded_mode_is_refused_where_its_records_show_the_other_mode(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    pending, queued = _crashed(make_journaled, directory, prioritized=True)
    (directory / MODE_FILE).unlink()  # as a journal of a build before the file leaves it

    message = str(_refused(make_journaled, directory, prioritized=False))
    assert "its records show it" in message
    assert _rows(engine) == 0
    store = make_journaled(directory, prioritized=True)
    assert _pending(store) == pending
    assert _queued(store) == queued
    assert (directory / MODE_FILE).exists()


def test_journal_without_a_recorded_mode_opens_in_the_given_mode_where_its_records_do_not_tell(
    make_journaled: JournaledFactory, tmp_path: Path
) -> None:
    directory = tmp_path / "journal"
    store = make_journaled(directory, prioritized=False)
    ids = store.add([msg(Q, 1), msg(Q, 2)])
    store.stop(checkpoint=False)
    (directory / MODE_FILE).unlink()

    store = make_journaled(directory, prioritized=False)
    assert _queued(store) == ids
    store.stop(checkpoint=False)
    _refused(make_journaled, directory, prioritized=True)  # the mode taken is recorded


def test_a_mode_file_that_cannot_be_written_stops_the_start_with_the_directory_named(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    """The OS refusing mode.json (here a directory in its place) is a journal that cannot be
    used, said as such, before anything is replayed; once it is cleared, all is there."""
    directory = tmp_path / "journal"
    pending, queued = _crashed(make_journaled, directory, prioritized=True)
    (directory / MODE_FILE).unlink()
    (directory / MODE_FILE).mkdir()
    with pytest.raises(JournalUnusableError) as refused:
        make_journaled(directory, prioritized=True)
    assert f"cannot open the journal in {directory}" in str(refused.value)
    assert MODE_FILE in str(refused.value)
    assert _rows(engine) == 0
    (directory / MODE_FILE).rmdir()
    store = make_journaled(directory, prioritized=True)
    assert _pending(store) == pending
    assert _queued(store) == queued
