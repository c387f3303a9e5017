"""Restarts rebuild exactly what was acknowledged: IDs, order and checkpoints stay consistent."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

from tests.conftest import count_rows
from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory

Q = "queue://orders"


def test_ids_after_a_replay_that_checkpointed_on_the_way_are_new(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    store = make_journaled(tmp_path / "j")
    ids = store.add([msg(Q, i, body=b"x" * 1000) for i in range(20)])
    store.stop(checkpoint=False)  # a crash: the window is only in the journal
    # The window is over the limit now, so replay checkpoints it part by part.
    store = make_journaled(tmp_path / "j", max_pending_bytes=10_000)
    assert count_rows(engine, "activemq_msgs") == 20
    [new] = store.add([msg(Q, 1000)])
    assert new > max(ids)
    assert [m.msgid_seq for m in store.page(Q, None, 100)] == [*range(20), 1000]
    store.checkpoint()
    assert count_rows(engine, "activemq_msgs") == 21
