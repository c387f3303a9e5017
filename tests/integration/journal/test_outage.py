"""The journaled store while its database refuses connections: what it can still accept."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from mqstore.errors import MqstoreError
from mqstore.store.model import Batch, Removal
from tests.conftest import Databases, count_rows, database_away
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def test_its_own_new_producers_can_send_while_the_database_is_away(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases
) -> None:
    store = make_journaled(checkpoint_interval_ms=50)
    store.new_producers("ID:this-broker-")
    with database_away(engine, databases):
        ids = store.add([msg(Q, 1, producer="ID:this-broker-7:1:1")])
        with pytest.raises(MqstoreError):  # any other producer may have stored before
            store.add([msg(Q, 1, producer="ID:someone-else:1:1")])
    store.checkpoint()
    with engine.connect() as conn:
        stored = conn.execute(sa.text("SELECT id, msgid_prod FROM activemq_msgs")).all()
    assert stored == [(ids[0], "ID:this-broker-7:1:1")]
    assert count_rows(engine, "activemq_msgs") == 1


def test_reading_the_checkpoint_position_without_a_database_is_a_store_error(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases
) -> None:
    from journal.checkpoint import read_position
    from mqstore.errors import DatabaseUnavailableError

    store = make_journaled()
    with database_away(engine, databases), pytest.raises(DatabaseUnavailableError):
        read_position(store.pg, store.journal_id)


def test_a_stop_while_the_database_is_away_keeps_the_journal_for_the_next_start(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    ids = store.add([msg(Q, 1)])
    with database_away(engine, databases):
        store.stop()  # no final checkpoint is possible: nothing raised, nothing lost
    again = make_journaled(tmp_path / "j")
    assert [m.id for m in again.page(Q, None, 10)] == ids
    again.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 1


def test_a_send_refused_with_the_removal_it_came_with_is_taken_alone_while_the_database_is_away(
    make_journaled: JournaledFactory, engine: Engine, databases: Databases
) -> None:
    """A merged batch whose removal of a checkpointed message needs the database fails in
    an outage; the send it held, retried alone, still needs no database."""
    store = make_journaled()
    [stored] = store.add([msg(Q, 1)])
    store.checkpoint()  # in the database now: removing it needs the database
    with database_away(engine, databases):
        with pytest.raises(MqstoreError):
            store.commit(Batch(adds=[msg(Q, 2)], removes=[Removal(Q, stored)]))
        [sent] = store.commit(Batch(adds=[msg(Q, 2)]))
    assert [m.id for m in store.page(Q, None, 10)] == [stored, sent]
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 2
