"""A journaled add when the message IDs are used up is refused before the journal takes
it: a record with an ID past BIGINT could never be applied, and every checkpoint after it
would fail."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import Engine

from tests.integration.conftest import msg
from tests.integration.journal.conftest import JournaledFactory
from tests.integration.test_message_ids_used_up import (
    LONG_MAX,
    Q,
    check_used_up,
    row_at,
    stored_ids,
)


def test_a_journaled_add_past_the_last_bigint_is_refused_before_the_journal(
    make_journaled: JournaledFactory, engine: Engine, tmp_path: Path
) -> None:
    row_at(engine, LONG_MAX - 1)
    store = make_journaled(tmp_path / "journal")
    check_used_up(store, engine, lambda: store.add([msg(Q, 2), msg(Q, 3)]))
    store.checkpoint()
    store.stop()
    reopened = make_journaled(tmp_path / "journal")  # nothing journaled that cannot apply
    assert [m.id for m in reopened.page(Q, None, 10)] == [LONG_MAX - 1]
    assert stored_ids(engine) == [LONG_MAX - 1]
